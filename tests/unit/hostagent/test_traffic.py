"""Traffic tool: completion times from the receiver's reorder stats, the FCT join
of receiver and sender JSON, and its CLI (argument errors, the fct command,
transfers through roce's sender with a scripted socket)."""
import csv
import json

import pytest

from hostagent import traffic
from hostagent.ecn import roce


def rx_flow(first_s, delivered_through, last_delivery_s, lost=0, late=0):
    return {"packets": delivered_through + 1, "ce": 0, "cnps_sent": 0, "first_s": first_s, "lost": lost,
            "reorder": {"delivered_through": delivered_through, "last_delivery_s": last_delivery_s,
                        "delivered": delivered_through + 1 - lost, "late": late, "duplicates": 0,
                        "reordered": 2, "depth_max": 3, "depth_mean": 0.5, "occupancy_max": 3,
                        "occupancy_mean": 0.25, "delay_mean_s": 0.001, "delay_max_s": 0.004,
                        "released_by_timeout": 0}}


RECEIVER = {"role": "receiver", "t0_wall": 1000.0, "flows": {
    "10.0.1.1/100": rx_flow(0.5, 99, 1.75),           # complete: PSN 99 delivered at 1.75 s
    "10.0.1.1/101": rx_flow(2.0, 60, 2.5),            # stopped at PSN 60
    "10.0.1.2/1": rx_flow(0.0, 5000, 9.0),            # an elephant
}}


def tx(qp, t0_wall, packets=100, plb=None):
    return {"role": "sender", "src": "10.0.1.1", "qp": qp, "sent": packets, "t0_wall": t0_wall,
            "packets": packets, "plb": plb}


SENDERS = [{"role": "transfers", "transfers": [tx(100, 1000.25), tx(101, 1001.75), tx(102, 1003.0)]},
           {"role": "sender", "src": "10.0.1.2", "qp": 1, "sent": 5001, "t0_wall": 1000.0, "plb": None}]


def test_completion_is_the_in_order_delivery_of_the_last_psn():
    flows = RECEIVER["flows"]
    assert traffic.completion_s(flows["10.0.1.1/100"], 100) == 1.75
    assert traffic.completion_s(flows["10.0.1.1/100"], 101) is None
    assert traffic.completion_s(flows["10.0.1.1/101"], 100) is None
    assert traffic.completion_s({"packets": 3}, 3) is None          # no reorder stats: unknown
    done = traffic.completions(RECEIVER, 100)
    assert set(done) == {"10.0.1.1/100", "10.0.1.2/1"}
    assert done["10.0.1.1/100"] == {"packets": 100, "completion_s": 1.75, "completed_wall": 1001.75,
                                    "first_s": 0.5, "span_s": 1.25}


def test_fct_joins_receiver_and_senders_by_flow():
    rows = traffic.flow_completion_times(RECEIVER, SENDERS)
    assert [r["flow"] for r in rows] == ["10.0.1.1/100", "10.0.1.1/101", "10.0.1.1/102"]  # no elephant
    done, partial, missing = rows
    assert done["complete"] and done["fct_s"] == 1.5 and done["rx_span_s"] == 1.25
    assert done["completed_wall"] == 1001.75 and done["start_wall"] == 1000.25 and done["depth_max"] == 3
    assert not partial["complete"] and partial["fct_s"] is None and partial["lost"] == 0
    assert not missing["complete"] and missing["lost"] is None
    s = traffic.fct_summary(rows)
    assert s == {"transfers": 3, "complete": 1, "fct_mean_s": 1.5, "fct_p50_s": 1.5, "fct_p99_s": 1.5,
                 "fct_max_s": 1.5}


def test_repaths_are_counted_per_transfer():
    rows = traffic.flow_completion_times(RECEIVER, [tx(100, 1000.0, plb={"repaths": [{}, {}]})])
    assert rows[0]["repaths"] == 2


def test_percentile_is_nearest_rank():
    v = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert [traffic.percentile(v, q) for q in (0, 20, 50, 99, 100)] == [1.0, 1.0, 3.0, 5.0, 5.0]
    with pytest.raises(ValueError):
        traffic.percentile([], 50)
    with pytest.raises(ValueError):
        traffic.percentile(v, 101)


def test_flow_rows_have_every_column():
    rows = traffic.flow_rows(RECEIVER, packets=100)
    assert all(list(r) == traffic.FLOW_COLUMNS for r in rows)
    assert rows[0]["completion_s"] == 1.75 and rows[1]["completion_s"] is None


def test_fct_command_writes_csv_and_json(tmp_path, capsys):
    (tmp_path / "rx.json").write_text(json.dumps(RECEIVER))
    (tmp_path / "tx.json").write_text(json.dumps(SENDERS[0]))
    out = tmp_path / "fct"
    assert traffic.main(["fct", "--receiver", str(tmp_path / "rx.json"), "--senders", str(tmp_path / "tx.json"),
                         "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "1/3 transfers complete; FCT mean 1.500 s" in printed and f"wrote {out}.csv" in printed
    rows = list(csv.DictReader(open(f"{out}.csv")))
    assert [r["complete"] for r in rows] == ["True", "False", "False"] and rows[0]["fct_s"] == "1.5"
    assert json.loads(open(f"{out}.json").read())["summary"]["complete"] == 1


def test_fct_command_names_bad_input(tmp_path, capsys):
    (tmp_path / "rx.json").write_text(json.dumps({"role": "receiver", "flows": {}}))
    (tmp_path / "tx.json").write_text(json.dumps(SENDERS[1]))
    assert traffic.main(["fct", "--receiver", str(tmp_path / "rx.json"), "--senders", str(tmp_path / "tx.json")]) == 2
    assert "no t0_wall" in capsys.readouterr().err
    (tmp_path / "rx.json").write_text(json.dumps(RECEIVER))
    assert traffic.main(["fct", "--receiver", str(tmp_path / "rx.json"), "--senders", str(tmp_path / "tx.json")]) == 2
    assert "no transfers" in capsys.readouterr().err
    (tmp_path / "tx.json").write_text(json.dumps({"role": "transfers", "transfers": [{"qp": 1}]}))
    assert traffic.main(["fct", "--receiver", str(tmp_path / "rx.json"), "--senders", str(tmp_path / "tx.json")]) == 2
    assert "lacks the field" in capsys.readouterr().err


HOST = ["--iface", "x", "--src-ip", "10.0.1.1", "--src-mac", "0a:00:01:00:00:01", "--gw-mac", "0a:00:00:00:01:01"]


@pytest.mark.parametrize("argv,message", [
    (["transfer", *HOST, "--dst-ip", "10.0.5.1", "--qp", "1", "--packets", "0"], "need --packets >= 1"),
    (["transfer", *HOST, "--dst-ip", "10.0.5.1", "--qp", str((1 << 24) - 1), "--packets", "5", "--count", "2"],
     "do not fit in 24 bits"),
    (["receive", *HOST, "--flows", "2"], "--flows needs --packets"),
    (["receive", *HOST, "--packets", "0"], "--packets must be >= 1"),
])
def test_argument_errors_are_named(argv, message, capsys):
    assert traffic.main(argv) == 2
    assert message in capsys.readouterr().err


class QuietSocket:
    def setblocking(self, flag):
        pass

    def recv(self, n):
        raise BlockingIOError()

    def send(self, frame):
        self.last = frame


def test_transfers_use_one_qp_each_and_write_a_row_per_transfer(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(roce, "open_socket", lambda iface: QuietSocket())
    out = tmp_path / "tx"
    assert traffic.main(["transfer", *HOST, "--dst-ip", "10.0.5.1", "--qp", "40", "--packets", "30",
                         "--count", "3", "--fixed-rate", "--line-rate-pps", "5000", "--payload", "16",
                         "--progress-s", "0", "--out", str(out)]) == 0
    s = json.loads(open(f"{out}.json").read())
    assert s["role"] == "transfers" and [t["qp"] for t in s["transfers"]] == [40, 41, 42]
    assert all(t["sent"] == t["packets"] == 30 for t in s["transfers"])
    rows = list(csv.DictReader(open(f"{out}.csv")))
    assert [r["qp"] for r in rows] == ["40", "41", "42"]
    assert "transfer 3/3 10.0.1.1 -> 10.0.5.1 qp 42: sent 30/30 packets" in capsys.readouterr().out


def test_a_receiver_stopped_by_sigterm_still_writes_what_it_measured(tmp_path):
    """SIGTERM ends `traffic receive` early, with its JSON written (needs root: a raw socket on lo)."""
    import signal
    import subprocess
    import sys
    import time
    out = tmp_path / "rx"
    proc = subprocess.Popen([sys.executable, "-m", "hostagent.traffic", "receive", "--iface", "lo",
                             "--src-ip", "127.0.0.1", "--src-mac", "00:00:00:00:00:01", "--gw-mac", "00:00:00:00:00:02",
                             "--duration", "60", "--progress-s", "30", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # Its first progress line says the receive loop runs, its signal handlers
    # installed (a fixed sleep was too short for a loaded machine's imports).
    deadline = time.monotonic() + 60
    first = ""
    while not first.startswith("[") and time.monotonic() < deadline and proc.poll() is None:
        first = proc.stdout.readline()
    assert first.startswith("["), f"the receiver never started its loop: {first!r}"
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=20)
    output = first + output
    assert proc.returncode == 0, output
    summary = __import__("json").loads((tmp_path / "rx.json").read_text())
    assert summary["role"] == "receiver"
