"""The tools a build stands on, shared by wheelbuild (the plan and its run) and
platforms (how each target is built): compilers (identify, probe flags), the
external tools and their fixes, glibc symbol versions, auditwheel repair, and
deterministic wheel zips. Imports nothing of wheelbuild or platforms."""
