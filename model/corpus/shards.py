"""The output folder: Parquet shards (one per slice of the corpus), the manifest that says which are finished
and what they were computed from, and the summary. Every file is written whole or not at all (written
beside its place, then renamed), so an interrupted run leaves only finished shards behind."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

MANIFEST = "manifest.json"
SUMMARY = "summary.json"
SHARDS = "shards"
FORMAT = 1


def shard_name(k: int) -> str:
    return f"{k:05d}.parquet"


def write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".part")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _json_safe(x):
    """NaN and infinities as null (JSON has no NaN)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_json_safe(v) for v in x]
    return x


def write_json(path: Path, obj: dict) -> None:
    write_atomic(path, (json.dumps(_json_safe(obj), indent=1, ensure_ascii=False) + "\n").encode("utf-8"))


def write_shard(out: Path, k: int, rows: list[dict]) -> Path:
    """One shard's rows as a Parquet table (a key a row lacks is null there)."""
    keys = list(dict.fromkeys(key for r in rows for key in r))
    table = pa.Table.from_pylist([{key: r.get(key) for key in keys} for r in rows])
    path = out / SHARDS / shard_name(k)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return path


def read_shard(path: Path) -> list[dict]:
    """A shard's rows, nulls left out (a row has the keys its analysis gave it)."""
    return [{k: v for k, v in r.items() if v is not None} for r in pq.read_table(path).to_pylist()]


def read_manifest(out: Path) -> dict | None:
    p = out / MANIFEST
    if not p.is_file():
        return None
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except ValueError:
        return None  # a manifest cut short: its shards are checked again below


def finished_shards(out: Path, manifest: dict | None) -> set[int]:
    """The shards the manifest records as finished whose file is there."""
    if not manifest:
        return set()
    return {int(k) for k in manifest.get("shards", {}) if (out / SHARDS / shard_name(int(k))).is_file()}
