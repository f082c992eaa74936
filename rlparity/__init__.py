"""rlparity: port reinforcement-learning policies to new hardware and prove the port exact."""

__version__ = "0.1.0"
