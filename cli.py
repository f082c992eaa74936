"""`python cli.py ...` from a checkout is the same as `rlparity ...`."""
from rlparity.cli import main

if __name__ == "__main__":
    main()
