"""The wheel builder (package name avoids the ignored build/ pattern) behind `cpubuild wheel`, `matrix` and `doctor`.

plan (pure: ISA sets, names, config-settings) -> runner (preflight, frontend,
repair, normalise, deliver) on a platform from cpubuild.platforms.
"""
