"""The launch ABI shared by the code generator and the JAX bridge.

XLA hands the handler ``1 + n_inputs`` buffers and ``n_outputs`` results.
Buffer 0 is the *launch info*, an int64 vector (shipped as little-endian
int32 pairs, since JAX without x64 has no int64 arrays) computed on the Python side
from static shapes; it carries every size so that one compiled kernel
serves all image sizes, buffer lengths and batch sizes. Only the number of
batch dimensions is part of the compiled code.

Layout of the launch info (``nb`` batch dims, ``ni`` inputs, ``no`` item
outputs, ``na`` accumulators)::

    [0]                 n_local      work items per batch element
    [1]                 n_total      n_local * prod(batch_shape)
    [2]                 tile_size    work items per scheduling unit
    [3]                 num_threads  worker threads to use
    [4 : 4+nb]          batch_shape
    then ni             rows of each input (true length, may be 0)
    then ni*nb          element stride of each input along each batch dim
                        (0 where that input is not batched)
    then ni             total elements XLA must pass for each input
    then na             rows of each accumulator
    then no+na          total elements of each result
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InfoLayout:
    nb: int
    ni: int
    no: int
    na: int

    HEADER = 4

    @property
    def batch_shape(self) -> int:
        return self.HEADER

    def rows(self, i: int) -> int:
        return self.HEADER + self.nb + i

    def stride(self, i: int, k: int) -> int:
        return self.HEADER + self.nb + self.ni + i * self.nb + k

    def in_elems(self, i: int) -> int:
        return self.HEADER + self.nb + self.ni + self.ni * self.nb + i

    def acc_rows(self, j: int) -> int:
        return self.HEADER + self.nb + 2 * self.ni + self.ni * self.nb + j

    def out_elems(self, j: int) -> int:
        """j counts item outputs first, then accumulators."""
        return self.HEADER + self.nb + 2 * self.ni + self.ni * self.nb + self.na + j

    @property
    def size(self) -> int:
        return self.out_elems(self.no + self.na)
