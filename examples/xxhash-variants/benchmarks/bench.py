"""xxhash_variants' benchmark as `cpubuild bench` runs it: each variant asked for hashes
1 MiB with XXH3-64 and prints the records as one JSON object.

    python benchmarks/bench.py --variants baseline,avx2
"""

from __future__ import annotations

import argparse
import json
import timeit

import xxhash_variants

SIZE = 1 << 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--variants", required=True, help="comma-separated variants to time")
    data, records = bytes(SIZE), []
    for variant in parser.parse_args().variants.split(","):
        seconds = min(timeit.repeat(lambda v=variant: xxhash_variants.xxh3_64(data, variant=v), number=50, repeat=5))
        records.append({"op": "xxh3_64", "dtype": "uint8", "shape": [SIZE], "variant": variant, "us": seconds / 50 * 1e6,
                        "torch_us": None, "memcpy_us": None, "flops": SIZE, "bytes": SIZE, "bytes_written": 0})
    print(json.dumps({"meta": {"title": "xxhash_variants: XXH3-64", "threads": 1}, "records": records, "targets": []}))


if __name__ == "__main__":
    main()
