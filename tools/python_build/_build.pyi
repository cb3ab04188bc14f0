# The write side's extension module (_build.cc), for type checkers:
# shardfs.Index.build and shardfs.pack (shardfs/_write.py) are the public
# calls; these are what they call, with options already checked.
import os
from typing import Dict, Iterable, Union

_StrPath = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

def _drain_log() -> None: ...
def build_index(out: _StrPath, shards: Iterable[_StrPath], options: Dict[str, object]) -> str: ...
def pack(src: _StrPath, out: _StrPath, options: Dict[str, object]) -> str: ...
