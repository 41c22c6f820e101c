"""The activation-log fixture in Python: every activation emits
(activation_id, key, callback, count, watermark). An input counts its key's
rows in state and (re)arms a "flush" timer WINDOW_MS after the watermark;
the timer reports the count and clears it. The engine's tests compare it,
row for row, with the native Rust fixture of the same name."""

import struct

import sluice_worker

WINDOW_MS = 1_000


def int64_key(key):
    # Canonical key encoding of one BIGINT: 0x01, then 8 bytes big-endian.
    if len(key) != 9 or key[0] != 1:
        raise ValueError(f"key {key.hex()} is not one BIGINT")
    return struct.unpack(">q", key[1:])[0]


class ActivationLog(sluice_worker.Handler):
    def process(self, call):
        out = call.results()
        acts = call.activations.to_pydict()
        for i in range(len(call)):
            before = acts["state_value"][i] or 0
            timer = acts["timer_name"][i]
            if timer is None:
                count = before + 1
                out.set_state(i, count)
                out.set_timer(i, "flush", max(acts["watermark"][i], 0) + WINDOW_MS)
                callback = "input"
            else:
                count = before
                out.clear_state(i)
                callback = "timer:" + timer
            out.emit(
                i,
                {
                    "activation_id": acts["id"][i],
                    "key": int64_key(acts["key"][i]),
                    "callback": callback,
                    "count": count,
                    "watermark": acts["watermark"][i],
                },
            )
        return out
