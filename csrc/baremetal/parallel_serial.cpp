// The thread pool's interface (parallel.h) run on the calling thread: for the
// bare-metal AMX harness ([tool.cpubuild.baremetal] in pyproject.toml), whose
// image has one CPU and no threads. Never part of the wheel.
#include "cpukern/parallel.h"

namespace cpukern {

void parallel_for_raw(int64_t n, int64_t, RangeFn fn, void* ctx) {
    if (n > 0) fn(ctx, 0, n);
}

void parallel_for_dynamic_raw(int64_t n, int64_t, RangeFn fn, void* ctx) {
    if (n > 0) fn(ctx, 0, n);
}

int num_threads() { return 1; }

}  // namespace cpukern
