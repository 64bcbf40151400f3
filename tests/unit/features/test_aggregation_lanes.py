"""The packed lanes (features/aggregation_lanes.py): the lane-wise add and
its overflow lanes, evaluated from the very expressions rendered into the
P4 program, equal int32 wrapping addition lane by lane, with no carry
between lanes, for every word width the generator accepts; and the
generated program holds one register and one word per chunk word."""
import numpy as np
import pytest

from features import aggregation_lanes as al

INT32_MIN, INT32_MAX = -2**31, 2**31 - 1


def pack_word(values) -> int:
    """int32 values as one big-endian word, lane 0 in the top bits (the wire's order)."""
    return int.from_bytes(np.asarray(values, np.int64).astype(">i4").tobytes(), "big")


def unpack_word(word: int, lanes: int) -> list[int]:
    return np.frombuffer(word.to_bytes(4 * lanes, "big"), ">i4").astype(np.int64).tolist()


def reference(a, b):
    exact = [x + y for x, y in zip(a, b)]
    wrapped = [(v + 2**31) % 2**32 - 2**31 for v in exact]
    return wrapped, [v != w for v, w in zip(exact, wrapped)]


@pytest.mark.parametrize("bits", [32, 256, 2048])
def test_lane_add_is_int32_addition_in_every_lane(bits):
    lanes = al.Lanes(64, 4, bits)
    n = lanes.lanes_per_word
    rng = np.random.default_rng(bits)
    edges = [INT32_MIN, INT32_MIN + 1, -1, 0, 1, INT32_MAX - 1, INT32_MAX]
    cases = [(rng.integers(INT32_MIN, INT32_MAX, n, endpoint=True), rng.integers(INT32_MIN, INT32_MAX, n, endpoint=True))
             for _ in range(200)]
    cases += [(rng.choice(edges, n), rng.choice(edges, n)) for _ in range(200)]
    cases += [([-1] * n, [1] * n), ([INT32_MAX] * n, [1] * n), ([INT32_MIN] * n, [-1] * n)]
    for a, b in cases:
        s, overflow = al.lane_add(lanes, pack_word(a), pack_word(b))
        want, overflowed = reference(list(map(int, a)), list(map(int, b)))
        assert unpack_word(s, n) == want
        assert [bool(overflow >> (32 * (n - 1 - i) + 31) & 1) for i in range(n)] == overflowed
        assert overflow & ~lanes.tops == 0          # only lanes' top bits


def test_a_carry_out_of_one_lane_leaves_its_neighbour_alone():
    lanes = al.Lanes(64, 4, 256)
    a, b = [0, INT32_MAX, -1, 0, 0, 0, 0, 0], [0, 1, 1, 0, 0, 0, 0, 0]
    s, overflow = al.lane_add(lanes, pack_word(a), pack_word(b))
    assert unpack_word(s, 8) == [0, INT32_MIN, 0, 0, 0, 0, 0, 0]
    assert overflow == 1 << (32 * 6 + 31)        # lane 1 alone


def test_the_generated_program_has_a_register_and_a_word_per_chunk_word():
    lanes = al.lanes()
    text = al.render(lanes)
    assert text.count("register<bit<%d>, bit<32>>(AGG_CELLS)" % lanes.word_bits) == lanes.chunks * lanes.words
    assert text.count(f"    bit<{lanes.word_bits}> w") == lanes.words                        # the first chunk
    assert text.count(f"    bit<{lanes.word_bits}> c") == (lanes.chunks - 1) * lanes.words   # the rest
    for part in ("head", "rest"):
        for action in ("start", "add", "read"):
            assert f"action {action}_{part}()" in text
    assert text.count(".read(meta.agg.sum, meta.agg.cell)") == lanes.chunks * lanes.words   # one add a word
    assert f"#define AGG_LANE_TOPS {lanes.word_bits}w0x{lanes.tops:0{lanes.word_bits // 4}x}" in text


@pytest.mark.parametrize("chunk, chunks, bits, what", [(64, 4, 48, "multiple of 32"), (64, 4, 4096, "must divide"),
                                                        (64, 0, 2048, "at least 1")])
def test_the_generator_refuses_shapes_it_cannot_pack(chunk, chunks, bits, what):
    with pytest.raises(ValueError, match=what):
        al.Lanes(chunk, chunks, bits)
