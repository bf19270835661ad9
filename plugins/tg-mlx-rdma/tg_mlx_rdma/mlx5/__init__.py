"""The mlx5 (ConnectX) user-space driver, written from the PRM.

``hw``: hardware access (BAR, DMA memory, PCI config) and ConnectX discovery; ``prm``: the layouts and
constants; ``cmdq``: the command queue; ``device``: HCA bring-up, PD, memory keys, CQs, RC QPs, work
requests and completions. Nothing here is imported by ``tg_mlx_rdma`` itself: the ``mlx5`` transport
loads it when it connects.
"""
