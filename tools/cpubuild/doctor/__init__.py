"""`cpubuild doctor`'s checks (checks.py); the command only prints them."""
