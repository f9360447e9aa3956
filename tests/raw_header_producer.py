"""Produce a record whose header NAME is arbitrary bytes, through librdkafka's C API.

confluent-kafka's Python producer only takes header names as ``str`` (sent as UTF-8), but the
Kafka protocol carries any bytes, and producers in other languages (librdkafka's C API, Go's
sarama with ``[]byte`` keys) write them. The stages must survive reading one. This calls the
librdkafka library that confluent-kafka ships, so the bytes reach the real broker unchanged.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import confluent_kafka

_VTYPE_TOPIC, _VTYPE_VALUE, _VTYPE_KEY, _VTYPE_MSGFLAGS, _VTYPE_HEADERS = 1, 4, 5, 7, 10
_MSG_F_COPY = 0x2
_RD_KAFKA_PRODUCER = 0


class _Mem(ctypes.Structure):
    _fields_ = (("ptr", ctypes.c_void_p), ("size", ctypes.c_size_t))


class _Value(ctypes.Union):
    _fields_ = (
        ("cstr", ctypes.c_char_p),
        ("i32", ctypes.c_int32),
        ("mem", _Mem),
        ("headers", ctypes.c_void_p),
        ("pad", ctypes.c_char * 64),
    )


class _Vu(ctypes.Structure):
    """``rd_kafka_vu_t``: one typed argument of ``rd_kafka_produceva``."""

    _fields_ = (("vtype", ctypes.c_int), ("u", _Value))


def _library() -> ctypes.CDLL:
    package = Path(confluent_kafka.__file__).parent
    (path,) = sorted(package.parent.glob("confluent_kafka.libs/librdkafka*.so*"))[:1]
    lib = ctypes.CDLL(str(path))
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_conf_set.argtypes = (
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_size_t,
    )
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t)
    lib.rd_kafka_headers_new.restype = ctypes.c_void_p
    lib.rd_kafka_headers_new.argtypes = (ctypes.c_size_t,)
    lib.rd_kafka_header_add.argtypes = (
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_ssize_t,
        ctypes.c_char_p,
        ctypes.c_ssize_t,
    )
    lib.rd_kafka_produceva.restype = ctypes.c_void_p
    lib.rd_kafka_produceva.argtypes = (ctypes.c_void_p, ctypes.POINTER(_Vu), ctypes.c_size_t)
    lib.rd_kafka_error_string.restype = ctypes.c_char_p
    lib.rd_kafka_error_string.argtypes = (ctypes.c_void_p,)
    lib.rd_kafka_flush.restype = ctypes.c_int
    lib.rd_kafka_flush.argtypes = (ctypes.c_void_p, ctypes.c_int)
    lib.rd_kafka_destroy.argtypes = (ctypes.c_void_p,)
    return lib


def produce_with_header_name(
    kafka: str, topic: str, key: bytes, value: bytes, header_name: bytes
) -> None:
    """Produce one record to ``topic`` with one header named ``header_name`` (value ``x``)."""
    lib = _library()
    error = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    for name, setting in ((b"bootstrap.servers", kafka.encode()), (b"acks", b"all")):
        if lib.rd_kafka_conf_set(conf, name, setting, error, len(error)) != 0:
            raise RuntimeError(error.value.decode())
    handle = lib.rd_kafka_new(_RD_KAFKA_PRODUCER, conf, error, len(error))
    if not handle:
        raise RuntimeError(error.value.decode())
    try:
        headers = lib.rd_kafka_headers_new(1)
        lib.rd_kafka_header_add(headers, header_name, len(header_name), b"x", 1)
        topic_name = topic.encode()  # the buffers live until the call has copied them
        key_buffer, value_buffer = (
            ctypes.create_string_buffer(key),
            ctypes.create_string_buffer(value),
        )
        args = (_Vu * 5)()
        args[0].vtype, args[0].u.cstr = _VTYPE_TOPIC, topic_name
        args[1].vtype, args[1].u.mem = _VTYPE_KEY, _Mem(ctypes.addressof(key_buffer), len(key))
        args[2].vtype = _VTYPE_VALUE
        args[2].u.mem = _Mem(ctypes.addressof(value_buffer), len(value))
        args[3].vtype, args[3].u.headers = _VTYPE_HEADERS, headers
        args[4].vtype, args[4].u.i32 = _VTYPE_MSGFLAGS, _MSG_F_COPY
        failed = lib.rd_kafka_produceva(handle, args, len(args))
        if failed:
            raise RuntimeError(lib.rd_kafka_error_string(failed).decode())
        if lib.rd_kafka_flush(handle, 30_000) != 0:
            raise RuntimeError(f"the record to {topic} was not delivered in 30 s")
    finally:
        lib.rd_kafka_destroy(handle)
