"""`python -m ftcli.cli` runs the ftcli command (same as the console script)."""

from ftcli.cli.app import main

main()
