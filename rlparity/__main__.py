from rlparity.cli import main

main()
