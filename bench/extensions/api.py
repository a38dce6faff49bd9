"""B-api-record and B-projection: `bench_api` (a command doing one record put, and a
projection) and 19 projection-only extensions `bench_p01` … `bench_p19` (20 slots in all)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from bench.extensions import PROJECTING
from extensions_host.sdk import Collection, Extension


class Item(BaseModel):
    key: str
    value: str


class PutInput(BaseModel):
    key: str = Field(min_length=1, max_length=256)
    value: str = Field(max_length=4096)


class PutOutput(BaseModel):
    key: str


class Summary(BaseModel):
    key: str
    value: str = ""


api_ext = Extension(
    id="bench_api",
    version="1.0.0",
    grants={"state", "commands", "projection"},
    collections={"item": Collection(Item, key=lambda i: i.key)},
    projection_schema=Summary,
    description="Benchmark: a command doing one record put; a projection reading one record.",
)


@api_ext.command("put", scope="global", input=PutInput, output=PutOutput)
def put(ctx: Any, data: PutInput) -> PutOutput:
    ctx.collection("item").put(Item(key=data.key, value=data.value))
    return PutOutput(key=data.key)


def _project(ctx: Any, conversation_id: str) -> Summary:
    item = ctx.collection("item").get(conversation_id)
    return Summary(key=conversation_id, value=item.value if item is not None else "")


api_ext.project(_project)


def projecting_id(index: int) -> str:
    return f"bench_p{index:02d}"


def _make(index: int) -> Extension:
    ext = Extension(
        id=projecting_id(index),
        version="1.0.0",
        grants={"state", "projection"},
        collections={"item": Collection(Item, key=lambda i: i.key)},
        projection_schema=Summary,
        description="Benchmark: a projection reading one record.",
    )
    ext.project(_project)
    return ext


(
    p01, p02, p03, p04, p05, p06, p07, p08, p09, p10,
    p11, p12, p13, p14, p15, p16, p17, p18, p19,
) = (_make(i) for i in range(1, PROJECTING))  # fmt: skip
