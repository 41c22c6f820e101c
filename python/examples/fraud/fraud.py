"""A vectorized fraud detector: flags a key whose second amount of at
least THRESHOLD arrives within WINDOW_MS of the first. The first arms a
"forget" timer and remembers itself in state; the timer forgets it. The
same logic as the built-in native `fraud_detector`, written with
pyarrow.compute over the whole call."""

import pyarrow as pa
import pyarrow.compute as pc

import sluice_worker

THRESHOLD = 1000
WINDOW_MS = 10_000


class Detector(sluice_worker.Handler):
    def process(self, call):
        out = call.results()
        acts = call.activations
        amount = call.input("amount")
        is_input = pc.invert(call.is_timer())
        big = pc.and_(is_input, pc.greater_equal(pc.fill_null(amount, 0), THRESHOLD))
        remembered = pc.equal(acts.column("state"), sluice_worker.STATE_VALUE)
        alert = pc.and_(big, remembered)
        first = pc.and_(big, pc.invert(remembered))
        timers = call.is_timer()

        alert_rows = pc.indices_nonzero(alert)
        if len(alert_rows):
            out.emit_batch(alert_rows, pa.record_batch([pc.take(amount, alert_rows)], names=["value"]))
        watermark = acts.column("watermark").to_pylist()
        for i in alert_rows.to_pylist():
            out.clear_state(i)
            out.delete_timer(i, "forget")
        for i in pc.indices_nonzero(first).to_pylist():
            out.set_state(i, amount[i].as_py())
            out.set_timer(i, "forget", max(watermark[i], 0) + WINDOW_MS)
        for i in pc.indices_nonzero(timers).to_pylist():
            out.clear_state(i)
        return out
