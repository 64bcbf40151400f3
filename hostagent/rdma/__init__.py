"""A RoCEv2 reliable connection (RC) in the host agent, and the congestion
controls deployed in AI fabrics on top of it (docs/rdma.md).

transport.py  queue pairs: messages segmented to the MTU, PSNs, coalesced
              ACKs and NAKs (AETH), go-back-N or selective repeat, RTO
cc/           one interface (cc/base.py), one module per algorithm:
              DCQCN, TIMELY, Swift, HPCC
"""
