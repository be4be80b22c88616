"""The commands (the `ftcli` CLI): each module parses one command group, calls the core (ftcli/*.py) or a gateway,
and renders the result through ftcli.output; app.py only wires them together."""
