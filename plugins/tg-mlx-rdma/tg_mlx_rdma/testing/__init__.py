"""Test support: ``mlx5_model``, a software ConnectX device that stands in for the NIC."""
