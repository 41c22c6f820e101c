"""A call's activations and the builder of its results."""

import pyarrow as pa
import pyarrow.compute as pc

STATE_ABSENT = 0
STATE_NULL = 1
STATE_VALUE = 2

_RESULTS = pa.schema([pa.field("activation_id", pa.uint64(), nullable=False)])
_MUTATIONS = pa.schema(
    [
        pa.field("result", pa.uint32(), nullable=False),
        pa.field("kind", pa.uint8(), nullable=False),
        pa.field("value", pa.int64()),
    ]
)
_TIMERS = pa.schema(
    [
        pa.field("result", pa.uint32(), nullable=False),
        pa.field("op", pa.uint8(), nullable=False),
        pa.field("name", pa.string(), nullable=False),
        pa.field("at_ms", pa.int64()),
    ]
)


def output_wire_schema(output):
    """The output batch's schema: the result index, then the output columns."""
    fields = [pa.field("result", pa.uint32(), nullable=False)]
    fields += [pa.field("out." + f.name, f.type, nullable=f.nullable) for f in output]
    return pa.schema(fields)


class Call:
    """One call: ``activations`` is a ``pyarrow.RecordBatch``."""

    def __init__(self, activations, output_schema):
        self.activations = activations
        self.output_schema = output_schema

    def __len__(self):
        return self.activations.num_rows

    def column(self, name):
        """An activation column by name (``in.<column>`` for input columns)."""
        return self.activations.column(name)

    def input(self, name):
        """The input column ``name`` (null where the activation is a timer)."""
        return self.activations.column("in." + name)

    def is_timer(self):
        """A boolean array: which activations are timer callbacks."""
        return self.activations.column("timer_name").is_valid()

    def state_values(self):
        """Each activation's state as a Python value: None when absent or
        null (see ``column('state')`` to tell them apart)."""
        return self.activations.column("state_value").to_pylist()

    def results(self):
        """An empty answer to this call: one result per activation."""
        return Results(self)


class Results:
    """The answer to a call, built per activation index ``i`` (the row of
    the activation in ``call.activations``)."""

    def __init__(self, call):
        self._call = call
        self._mutations = []
        # Vectorized mutations: (indices, kind, values) arrays per call of
        # set_states / clear_states.
        self._mutation_arrays = []
        self._timers = []
        self._outputs = []
        self._output_batches = []

    def _check(self, i):
        if not 0 <= i < len(self._call):
            raise IndexError(f"activation index {i} is not in 0..{len(self._call)}")

    def set_state(self, i, value):
        """Set activation ``i``'s key state to ``value`` (an int, or None
        for a present null)."""
        self._check(i)
        self._mutations.append((i, 0, value))

    def clear_state(self, i):
        """Make activation ``i``'s key state absent."""
        self._check(i)
        self._mutations.append((i, 1, None))

    def set_timer(self, i, name, at_ms):
        """Set (or move) timer ``name`` of activation ``i``'s key."""
        self._check(i)
        self._timers.append((i, 0, name, at_ms))

    def delete_timer(self, i, name):
        """Delete timer ``name`` of activation ``i``'s key."""
        self._check(i)
        self._timers.append((i, 1, name, None))

    def emit(self, i, row):
        """Emit one output row (a dict of output column to value) for
        activation ``i``."""
        self._check(i)
        self._outputs.append((i, row))

    def emit_batch(self, indices, batch):
        """Emit many output rows at once (vectorized): row ``r`` of
        ``batch`` (a ``pyarrow.RecordBatch`` or ``Table`` with the output
        columns) belongs to activation ``indices[r]``."""
        indices = pa.array(indices, pa.uint32())
        if len(indices) != batch.num_rows:
            raise ValueError(f"{len(indices)} indices for {batch.num_rows} rows")
        if len(indices) and (pc.max(indices).as_py() >= len(self._call)):
            raise IndexError(f"an activation index is not in 0..{len(self._call)}")
        self._output_batches.append((indices, batch))

    def set_states(self, indices, values):
        """Set the state of many activations' keys at once (vectorized):
        the key of activation ``indices[r]`` gets ``values[r]`` (null for a
        present null)."""
        indices = self._indices(indices)
        values = pa.array(values).cast(pa.int64())
        if len(values) != len(indices):
            raise ValueError(f"{len(indices)} indices for {len(values)} values")
        kinds = pa.array([0] * len(indices), pa.uint8())
        self._mutation_arrays.append((indices, kinds, values))

    def clear_states(self, indices):
        """Make the state of many activations' keys absent (vectorized)."""
        indices = self._indices(indices)
        kinds = pa.array([1] * len(indices), pa.uint8())
        self._mutation_arrays.append((indices, kinds, pa.nulls(len(indices), pa.int64())))

    def _indices(self, indices):
        indices = pa.array(indices).cast(pa.uint32())
        if indices.null_count:
            raise ValueError("an activation index is null")
        if len(indices) and pc.max(indices).as_py() >= len(self._call):
            raise IndexError(f"an activation index is not in 0..{len(self._call)}")
        return indices

    def to_batches(self):
        """The four record batches of the protocol's ``Complete``."""
        call = self._call
        ids = call.activations.column("id")
        results = pa.RecordBatch.from_arrays([ids.cast(pa.uint64())], schema=_RESULTS)
        m = self._mutations
        parts = [
            pa.RecordBatch.from_arrays(
                [
                    pa.array([x[0] for x in m], pa.uint32()),
                    pa.array([x[1] for x in m], pa.uint8()),
                    pa.array([x[2] for x in m], pa.int64()),
                ],
                schema=_MUTATIONS,
            )
        ]
        parts += [pa.RecordBatch.from_arrays(list(a), schema=_MUTATIONS) for a in self._mutation_arrays]
        mutations = _by_result(pa.Table.from_batches(parts, schema=_MUTATIONS))
        t = sorted(self._timers, key=lambda x: x[0])
        timers = pa.RecordBatch.from_arrays(
            [
                pa.array([x[0] for x in t], pa.uint32()),
                pa.array([x[1] for x in t], pa.uint8()),
                pa.array([x[2] for x in t], pa.string()),
                pa.array([x[3] for x in t], pa.int64()),
            ],
            schema=_TIMERS,
        )
        schema = output_wire_schema(call.output_schema)
        o = self._outputs
        columns = [pa.array([x[0] for x in o], pa.uint32())]
        for f in call.output_schema:
            columns.append(pa.array([x[1].get(f.name) for x in o], f.type))
        parts = [pa.RecordBatch.from_arrays(columns, schema=schema)]
        for indices, batch in self._output_batches:
            cols = [indices] + [batch.column(f.name).cast(f.type) for f in call.output_schema]
            parts.append(pa.RecordBatch.from_arrays(cols, schema=schema))
        output = _by_result(pa.Table.from_batches(parts, schema=schema))
        return results, mutations, timers, output


def _by_result(table):
    """One batch with the table's rows grouped by result, in order; the
    sort is stable, so each result's rows keep the order they were given
    in."""
    table = table.take(pc.sort_indices(table, sort_keys=[("result", "ascending")]))
    batches = table.combine_chunks().to_batches()
    if batches:
        return batches[0]
    return pa.RecordBatch.from_arrays(
        [pa.array([], f.type) for f in table.schema], schema=table.schema
    )
