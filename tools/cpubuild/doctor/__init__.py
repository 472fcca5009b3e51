"""What this host can do for a project: `cpubuild doctor`'s checks (checks.py) and
`cpubuild matrix`'s per-variant report (matrixreport.py); the commands only print them."""
