"""The handler base class."""


class Handler:
    """A process-function handler. The worker makes one per engine session,
    so a handler's own attributes never carry state that matters: the
    engine's state and timers are the only truth, and a restarted worker
    starts from them."""

    def process(self, call):
        """Answer one call: return ``call.results()`` filled in. Raising an
        exception fails the whole call; nothing of it is applied."""
        raise NotImplementedError("a Handler must implement process(call)")
