"""The front door: the `fabric` command (fabric/cli.py) and what it runs:
the launcher's main job (run.py), the interactive shell (shell.py)."""
