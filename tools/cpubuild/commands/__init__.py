"""Sub-commands of `cpubuild`, one module each (see cli.COMMANDS)."""
