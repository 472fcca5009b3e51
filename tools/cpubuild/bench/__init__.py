"""What `cpubuild bench` and projects' benchmark scripts share: round-robin
timing with tcmalloc preloaded (`timing`) and the speedup-ladder plot
(`plot`). The measuring itself is the project's (its declared benchmark)."""
