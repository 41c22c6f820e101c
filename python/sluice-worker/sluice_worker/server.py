"""The worker: serves one handler class over the Sluice remote protocol.

The engine starts it (inside its sandbox) as::

    python -m sluice_worker --socket /run/sluice/worker.sock \\
        --package /pkg --entry fraud:Detector

and passes the binding it expects in the environment (``SLUICE_BINDING_*``),
with the function's output schema (``SLUICE_OUTPUT_SCHEMA``, base64 Arrow IPC)
and limits. Each session gets a fresh handler; calls of a session are
answered one at a time, in order.
"""

import importlib
import io
import os
import sys
import time
import traceback
from concurrent import futures

import grpc
import pyarrow as pa

from ._proto import process_worker_pb2 as pb
from ._proto import process_worker_pb2_grpc as pb_grpc
from .call import Call

MIN_VERSION = 1
MAX_VERSION = 1


class Failed(Exception):
    """A call failure with its protocol code."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


def encode(batch):
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue()


def decode_one(what, data, max_rows):
    if not data:
        raise Failed("SLC-RMT-009", f"malformed {what}: the payload is empty")
    try:
        reader = pa.ipc.open_stream(data)
        batch = reader.read_next_batch()
    except Exception as e:  # pyarrow raises several types for bad input
        raise Failed("SLC-RMT-010", f"Arrow IPC decoding {what}: {e}")
    try:
        reader.read_next_batch()
        raise Failed("SLC-RMT-009", f"malformed {what}: the stream holds more than one record batch")
    except StopIteration:
        pass
    if batch.num_rows > max_rows:
        raise Failed("SLC-RMT-007", f"{what} rows is {batch.num_rows}, over the limit of {max_rows}")
    return batch


class Settings:
    """What the engine told this worker at launch."""

    def __init__(self, env):
        self.binding = pb.Binding(
            name=env["SLUICE_BINDING_NAME"],
            version=int(env["SLUICE_BINDING_VERSION"]),
            binding_hash=env["SLUICE_BINDING_HASH"],
            runtime=env.get("SLUICE_BINDING_RUNTIME", "python"),
        )
        # An Arrow IPC stream with no batches, in hex.
        self.output_schema = pa.ipc.open_stream(bytes.fromhex(env["SLUICE_OUTPUT_SCHEMA"])).schema
        self.max_activations = int(env.get("SLUICE_MAX_ACTIVATIONS", "1024"))
        self.max_message_bytes = int(env.get("SLUICE_MAX_MESSAGE_BYTES", str(64 * 1024 * 1024)))


def describe(b):
    return f"'{b.name}' version {b.version} ({b.runtime}, binding {b.binding_hash})"


class Service(pb_grpc.ProcessWorkerServicer):
    def __init__(self, settings, handler_class):
        self.settings = settings
        self.handler_class = handler_class

    def Session(self, request_iterator, context):
        try:
            first = next(request_iterator)
        except StopIteration:
            return
        if first.WhichOneof("kind") != "hello":
            yield refusal("SLC-RMT-013", "protocol violation: the first frame of a session must be Hello")
            return
        hello = first.hello
        chosen = min(hello.max_version, MAX_VERSION)
        if hello.min_version > hello.max_version or chosen < max(hello.min_version, MIN_VERSION):
            yield refusal(
                "SLC-RMT-004",
                f"protocol versions do not overlap: the engine speaks {hello.min_version}..={hello.max_version}, "
                f"the worker {MIN_VERSION}..={MAX_VERSION}",
            )
            return
        ours = self.settings.binding
        if hello.binding != ours:
            yield refusal(
                "SLC-RMT-005",
                f"binding mismatch: the engine expects {describe(hello.binding)}, the worker serves {describe(ours)}",
            )
            return
        engine_max = hello.limits.max_message_bytes or (1 << 62)
        yield pb.WorkerFrame(
            welcome=pb.Welcome(
                version=chosen,
                binding=ours,
                limits=pb.Limits(max_message_bytes=self.settings.max_message_bytes, max_calls_in_flight=1),
            )
        )
        handler = self.handler_class()
        for frame in request_iterator:
            if frame.WhichOneof("kind") != "call":
                yield refusal("SLC-RMT-013", "protocol violation: only Call frames may follow the handshake")
                return
            call = frame.call
            try:
                answer = self.answer(handler, call, hello.generation, engine_max)
            except Failed as f:
                answer = failure(call, f.code, f.message)
            yield answer

    def answer(self, handler, call, generation, engine_max):
        if call.generation != generation:
            raise Failed("SLC-RMT-013", f"protocol violation: call {call.call_id} carries generation {call.generation}, the session's is {generation}")
        if call.activations > self.settings.max_activations:
            raise Failed("SLC-RMT-007", f"activations in one call is {call.activations}, over the limit of {self.settings.max_activations}")
        batch = decode_one("activations", call.activations_ipc, call.activations)
        if batch.num_rows != call.activations:
            raise Failed("SLC-RMT-009", f"malformed activations: the call declares {call.activations} activations but carries {batch.num_rows}")
        started = time.monotonic()
        try:
            results = handler.process(Call(batch, self.settings.output_schema))
            parts = results.to_batches()
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            sys.stderr.flush()
            raise Failed("SLC-RMT-011", f"handler error: {type(e).__name__}: {e}")
        elapsed_ms = (time.monotonic() - started) * 1000
        if call.deadline_ms and elapsed_ms > call.deadline_ms:
            raise Failed("SLC-RMT-008", f"call {call.call_id} got no answer within its deadline of {call.deadline_ms}ms")
        results_b, mutations, timers, output = parts
        frame = pb.WorkerFrame(
            complete=pb.Complete(
                call_id=call.call_id,
                generation=call.generation,
                results=results_b.num_rows,
                output_rows=output.num_rows,
                results_ipc=encode(results_b),
                mutations_ipc=encode(mutations),
                timers_ipc=encode(timers),
                output_ipc=encode(output),
            )
        )
        size = frame.ByteSize()
        if size > engine_max:
            raise Failed("SLC-RMT-007", f"the response (bytes) is {size}, over the limit of {engine_max}")
        return frame


def refusal(code, message):
    return pb.WorkerFrame(refusal=pb.Refusal(code=code, message=message))


def failure(call, code, message):
    return pb.WorkerFrame(failure=pb.Failure(call_id=call.call_id, generation=call.generation, code=code, message=message))


def load_handler(package, entry):
    module_name, _, class_name = entry.partition(":")
    if not module_name or not class_name:
        raise SystemExit(f"sluice-worker: entry '{entry}' must be module:Class")
    sys.path.insert(0, package)
    module = importlib.import_module(module_name)
    handler_class = getattr(module, class_name, None)
    if handler_class is None:
        raise SystemExit(f"sluice-worker: module '{module_name}' has no '{class_name}'")
    return handler_class


def serve(socket_path, package, entry, env=None):
    """Serve until killed; prints ``ready`` on stdout once listening."""
    settings = Settings(env if env is not None else os.environ)
    handler_class = load_handler(package, entry)
    options = [
        ("grpc.max_receive_message_length", settings.max_message_bytes),
        ("grpc.max_send_message_length", -1),
    ]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=options)
    pb_grpc.add_ProcessWorkerServicer_to_server(Service(settings, handler_class), server)
    server.add_insecure_port("unix:" + socket_path)
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()
