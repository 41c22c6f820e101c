"""The benchmark's running total, vectorized with pyarrow.compute: each
activation's state becomes state + amount, and it emits (key, total).
The same function as `RunningTotal` in examples/process_runtimes_bench.rs."""

import pyarrow as pa
import pyarrow.compute as pc

import sluice_worker


class RunningTotal(sluice_worker.Handler):
    def process(self, call):
        out = call.results()
        total = pc.add_checked(pc.fill_null(call.column("state_value"), 0), call.input("amount"))
        rows = pa.array(range(len(call)), pa.uint32())
        out.set_states(rows, total)
        out.emit_batch(rows, pa.record_batch([call.input("key"), total], names=["key", "total"]))
        return out
