#!/usr/bin/env python3
"""Reads the bank history files of a `shoal bench bank` run directory, for tracing a failed
check by hand (keep the directory with SHOAL_KEEP_RUN_DIR=1; the record layout is
src/server/bank_history_file.h's).

  bank-history.py DIR              versions written by two transactions or more, each writer
                                   with what the files say of it (acknowledged and when, never
                                   acknowledged, or no record: a failed attempt or unflushed)
  bank-history.py DIR --key K      every read and write of account K, in time order
  bank-history.py DIR --txn T      the record of transaction T (T<shard>.<worker>.<attempt>)

Times are the wall clock's seconds modulo 1000, as the JSON's kills[].killed_unix_us / 1e6 % 1000.
With SHOAL_BANK_DUMP=1 the leaders log every account's final `bank-final KEY BALANCE SEQ WRITER`
at the check's scan, and with SHOAL_DISCARD_TRACE=1 each survivor's discard logs every journaled
write naming a lost TID (`discard-trace ...`, with the time of the discard).
"""
import argparse
import collections
import glob
import os
import struct
import sys

MAGIC = b"SHBANKH1"
HEADER_BYTES = 32
FIXED_BYTES = 18  # reads u8, writes u8, id u64, time u64


def read_file(path):
    """The records of one file: (id, time_us, reads [(key, seq, writer)], writes [(key, seq)])."""
    data = open(path, "rb").read()
    if data[:8] != MAGIC[: len(data[:8])]:
        sys.exit(f"bank-history: {path}: not a bank history file")
    records = []
    at = HEADER_BYTES
    while at + FIXED_BYTES <= len(data):
        reads, writes = data[at], data[at + 1]
        size = FIXED_BYTES + 24 * reads + 16 * writes
        if at + size > len(data):
            break  # a torn last record
        txn, time_us = struct.unpack_from("<QQ", data, at + 2)
        p = at + FIXED_BYTES
        r = [struct.unpack_from("<QQQ", data, p + 24 * i) for i in range(reads)]
        p += 24 * reads
        w = [struct.unpack_from("<QQ", data, p + 16 * i) for i in range(writes)]
        records.append((txn, time_us, r, w))
        at += size
    return records


def name(txn):
    return f"T{txn >> 48}.{(txn >> 40) & 0xFF}.{txn & ((1 << 40) - 1)}"


def when(time_us):
    return f"{time_us / 1e6 % 1000:.3f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--key", type=int)
    ap.add_argument("--txn")
    a = ap.parse_args()
    files = sorted(glob.glob(os.path.join(a.dir, "bank-history-*.bin")))
    if not files:
        sys.exit(f"bank-history: no bank-history-*.bin in {a.dir}")
    acked, unacked, rows = {}, set(), []
    for f in files:
        source = os.path.basename(f).split("-pid")[0]
        for txn, time_us, r, w in read_file(f):
            if not r and not w:
                unacked.add(txn)
                continue
            acked[txn] = time_us
            rows.append((time_us, txn, r, w, source))
    rows.sort()

    def status(txn):
        if txn == 0:
            return "the load"
        if txn in acked:
            return f"acknowledged {when(acked[txn])}"
        return "never acknowledged" if txn in unacked else "no record"

    if a.txn:
        for time_us, txn, r, w, source in rows:
            if name(txn) == a.txn:
                print(when(time_us), name(txn), source, "reads",
                      [(k, s, name(x)) for k, s, x in r], "writes", w)
        if a.txn in {name(t) for t in unacked}:
            print(a.txn, "never acknowledged (a marker only)")
        return
    if a.key is not None:
        for time_us, txn, r, w, source in rows:
            for k, s, x in r:
                if k == a.key:
                    print(when(time_us), name(txn), f"read v{s} from {name(x)} ({status(x)})",
                          "writes", [v for kk, v in w if kk == a.key], source)
        return
    writers = collections.defaultdict(set)  # (key, version) -> its writers, by writes and reads
    for _, txn, r, w, _ in rows:
        for k, s in w:
            writers[(k, s)].add(txn)
        for k, s, x in r:
            if x != 0:
                writers[(k, s)].add(x)
    twice = sorted(kv for kv, ws in writers.items() if len(ws) > 1)
    for k, s in twice:
        print(f"k={k} v={s}: " + ", ".join(f"{name(x)} {status(x)}" for x in sorted(writers[(k, s)])))
    print(f"{len(rows)} acknowledged, {len(unacked)} never acknowledged, "
          f"{len(twice)} versions written twice or more ({len(files)} files)")


if __name__ == "__main__":
    main()
