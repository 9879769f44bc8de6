"""Restate's web UI in front of Torpor's admin API: `torpor dev --restate-ui PATH`.

Restate's UI is a single-page app that restate-server serves at `/ui/` on its admin port; it then
calls the admin API on the same origin (`GET /version`, `/services`, `/deployments`, `POST /query`
with SQL over `sys_invocation`, `sys_journal`, `sys_invocation_state`, `state`, ...). Torpor's
admin API answers those in restate-server's shapes, so the same files work in front of it.

The files are Restate's (source-available, not open source): Torpor does not ship them. They are
read at start-up from what the user has: a directory of the UI's files (`index.html`, `assets/`,
...), or the `restate-server` binary itself (1.7 and later embed them). A binary is read without
running it: its files are found through the table the Rust `include_dir` crate compiles into it
(an array of `DirEntry` values, each a path and the file's bytes, linked by relocations), see
`files_from_binary`.

`RestateUi` serves them: `/ui/...` a file (any other path under `/ui/` the app's `index.html`, as
restate-server does, so the app's own routes load), `/` and `/ui` redirect to `/ui/`, and
everything else goes to the admin API's router unchanged.
"""

from __future__ import annotations

import mimetypes
import mmap
import os
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from adapters.local.asgi import Dispatcher
from control_plane.errors import TorporError
from http_api.http import HttpRequest, HttpResponse

_ELF_MAGIC = b"\x7fELF"
_RELATIVE = {62: 8, 183: 1027}
"""`R_<arch>_RELATIVE` relocation types by ELF machine (x86-64: 8, AArch64: 1027)."""
_ENTRY_BYTES = 40
"""Size of one `include_dir::DirEntry` on 64-bit targets: two (pointer, length) pairs and the tag."""
_FILE_TAG, _DIR_TAG = 1, 0
_MAX_FILES = 20_000
_MIME = {".woff2": "font/woff2", ".woff": "font/woff", ".ttf": "font/ttf", ".js": "text/javascript",
         ".mjs": "text/javascript", ".webmanifest": "application/manifest+json", ".svg": "image/svg+xml"}  # fmt: skip


class RestateUiError(TorporError):
    """The path given for Restate's UI holds no UI: not a directory with `index.html`, nor a
    restate-server binary with its files embedded."""

    code = "restate_ui"


@dataclass(frozen=True, slots=True)
class RestateUiFiles:
    """Restate's web UI: `files` by path relative to `/ui/` (`index.html`, `assets/x.js`), and where
    they were read (`source`, for the log line)."""

    files: Mapping[str, bytes]
    source: str

    @property
    def size_bytes(self) -> int:
        """The files' total size (bytes)."""
        return sum(len(v) for v in self.files.values())


def load_restate_ui(path: str | os.PathLike[str]) -> RestateUiFiles:
    """Restate's web UI from `path`: a directory of its files, or a restate-server binary.

    Raises:
        RestateUiError: `path` does not exist, or holds no UI (a directory without `index.html`,
            a file that is not an ELF binary embedding it); the message names the fix.
    """
    where = Path(path).expanduser()
    if where.is_dir():
        files = {
            p.relative_to(where).as_posix(): p.read_bytes()
            for p in sorted(where.rglob("*"))
            if p.is_file() and not p.is_symlink()
        }
        if "index.html" not in files:
            raise RestateUiError(
                f"{where} has no index.html: give the directory of Restate's web UI files, or the "
                "restate-server binary (npm install @restatedev/restate-server puts it under node_modules)"
            )
        return RestateUiFiles(files, str(where))
    if not where.is_file():
        raise RestateUiError(
            f"{where} does not exist: give the restate-server binary (e.g. $(which restate-server)) or a "
            "directory of Restate's web UI files"
        )
    with where.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        try:
            files = files_from_binary(data)
        except (ValueError, struct.error, IndexError) as exc:
            raise RestateUiError(
                f"found no web UI in {where} ({exc}): give a restate-server binary of version 1.7 or "
                "later for Linux (x86-64 or arm64), or a directory of Restate's web UI files"
            ) from exc
    return RestateUiFiles(files, str(where))


class _Elf:
    """The parts of a 64-bit little-endian ELF file `files_from_binary` reads: its loaded sections
    (to map a virtual address to a file offset) and its relative relocations (where the linker puts
    each pointer of a position-independent executable: address → target address)."""

    def __init__(self, data: mmap.mmap | bytes) -> None:
        if data[:4] != _ELF_MAGIC or data[4] != 2 or data[5] != 1:
            raise ValueError("not a 64-bit little-endian ELF file")
        machine = struct.unpack_from("<H", data, 0x12)[0]
        relative = _RELATIVE.get(machine)
        if relative is None:
            raise ValueError(f"ELF machine {machine} is neither x86-64 nor AArch64")
        shoff = struct.unpack_from("<Q", data, 0x28)[0]
        shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
        self.data = data
        self.sections: list[tuple[int, int, int]] = []  # (address, file offset, size) of loaded sections
        self.relocations: dict[int, int] = {}
        for index in range(shnum):
            _, kind, _, address, offset, size = struct.unpack_from("<IIQQQQ", data, shoff + index * shentsize)
            if kind == 4:  # SHT_RELA
                table = memoryview(data)[offset : offset + size - size % 24].cast("Q")
                try:
                    for k in range(0, len(table), 3):
                        if table[k + 1] & 0xFFFFFFFF == relative:
                            self.relocations[table[k]] = table[k + 2]
                finally:
                    table.release()
            elif kind not in (0, 8) and address:  # loaded, with bytes in the file (not SHT_NOBITS)
                self.sections.append((address, offset, size))
        if not self.relocations:
            raise ValueError("no relative relocations: not a position-independent executable")

    def offset(self, address: int) -> int:
        """The file offset of virtual `address`. Raises ValueError if no section holds it."""
        for start, offset, size in self.sections:
            if start <= address < start + size:
                return offset + address - start
        raise ValueError(f"address {address:#x} is in no section")

    def address(self, offset: int) -> int | None:
        """The virtual address of file `offset`, or None."""
        for start, file_offset, size in self.sections:
            if file_offset <= offset < file_offset + size:
                return start + offset - file_offset
        return None

    def word(self, address: int) -> int:
        return int(struct.unpack_from("<Q", self.data, self.offset(address))[0])

    def slice(self, address: int) -> bytes | None:
        """The bytes of the `&[u8]` (or `&str`) stored at `address`: a relocated pointer and a
        length; None if no pointer was relocated there."""
        target = self.relocations.get(address)
        if target is None:
            return None
        length = self.word(address + 8)
        if length > len(self.data):
            raise ValueError(f"a slice of {length} bytes at {address:#x}")
        start = self.offset(target) if length else 0
        return bytes(self.data[start : start + length])


def files_from_binary(data: mmap.mmap | bytes) -> dict[str, bytes]:
    """The files of Restate's web UI embedded in a restate-server binary (ELF, position-independent),
    by path: `{"index.html": b"<!DOCTYPE html>...", "assets/x.js": ...}`.

    restate-server embeds them with the Rust `include_dir` crate: arrays of `DirEntry` values of 40
    bytes (the tag, 1 file or 0 directory; the path `&str`; the file's bytes `&[u8]` or the
    directory's entries), each pointer placed by a relative relocation. The root's entry for
    `index.html` is found first (a relocated pointer to the bytes `index.html` with length 10, the
    file's bytes beside it starting `<!DOCTYPE html`); the root's entries are the run of entries
    around it whose paths have no `/` (a subdirectory's all start with its path and `/`), and every
    file under them is read.

    Raises:
        ValueError: not an ELF file of x86-64 or AArch64, or no embedded UI found.
    """
    elf = _Elf(data)
    paths = set()
    at = data.find(b"index.html")
    while at != -1:
        address = elf.address(at)
        if address is not None:
            paths.add(address)
        at = data.find(b"index.html", at + 1)
    for address, target in elf.relocations.items():
        if target not in paths or elf.word(address + 8) != 10:
            continue
        entry = address - 8
        if _root_entry(elf, entry) and (elf.slice(entry + 24) or b"")[:15].lower() == b"<!doctype html>":
            first, last = entry, entry
            while _root_entry(elf, first - _ENTRY_BYTES):
                first -= _ENTRY_BYTES
            while _root_entry(elf, last + _ENTRY_BYTES):
                last += _ENTRY_BYTES
            count = (last - first) // _ENTRY_BYTES + 1
            return dict(_walk(elf, first, count, 0))
    raise ValueError("no embedded web UI (no include_dir entry for index.html)")


def _entry(elf: _Elf, entry: int) -> tuple[int, str] | None:
    """`(tag, path)` of the `DirEntry` at `entry`, or None if there is none there."""
    if (entry + 8) not in elf.relocations or (entry + 24) not in elf.relocations:
        return None
    try:
        tag = elf.word(entry) & 0xFF
        length = elf.word(entry + 16)
        if tag not in (_FILE_TAG, _DIR_TAG) or not 0 < length < 4096:
            return None
        path = (elf.slice(entry + 8) or b"").decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None
    if path.startswith("/") or ".." in path.split("/"):
        return None
    return tag, path


def _root_entry(elf: _Elf, entry: int) -> bool:
    found = _entry(elf, entry)
    return found is not None and "/" not in found[1]


def _walk(elf: _Elf, start: int, count: int, depth: int) -> Iterator[tuple[str, bytes]]:
    """`(path, bytes)` of every file under the `count` entries at `start`. Raises ValueError on an
    entry that is not one, or directories nested more than 16 deep."""
    if depth > 16 or count > _MAX_FILES:
        raise ValueError("directories nested too deep, or too many files")
    for n in range(count):
        entry = start + n * _ENTRY_BYTES
        found = _entry(elf, entry)
        if found is None:
            raise ValueError(f"no include_dir entry at {entry:#x}")
        tag, path = found
        if tag == _FILE_TAG:
            yield path, elf.slice(entry + 24) or b""
        else:
            yield from _walk(elf, elf.relocations[entry + 24], elf.word(entry + 32), depth + 1)


class RestateUi:
    """Restate's web UI at `/ui/` over the admin API's `router` (a dispatcher for `asgi_app`).

    `GET`/`HEAD` of `/` or `/ui`: a redirect to `/ui/`; of `/ui/NAME`: the file NAME, else the app's
    `index.html` (its own routes, `/ui/invocations/inv_…`, load the app, as on restate-server).
    Any other request goes to `router` unchanged (the admin API: `/version`, `/query`, ...).

    Args:
        files: Restate's UI (`load_restate_ui`).
        router: The admin API's router.
    """

    def __init__(self, files: RestateUiFiles, router: Dispatcher) -> None:
        self.files = files
        self.router = router

    def dispatch(self, request: HttpRequest) -> HttpResponse:
        """A file of the UI, a redirect to it, or the admin API's answer (see the class doc)."""
        if request.method.upper() in ("GET", "HEAD"):
            path = request.path
            if path in ("/", "/ui"):
                return HttpResponse(308, b"", {"location": "/ui/"})
            if path.startswith("/ui/"):
                return self._file(path.removeprefix("/ui/"))
        return self.router.dispatch(request)

    def _file(self, name: str) -> HttpResponse:
        body = self.files.files.get(name) if name else None
        if body is None:  # the app's own routes: its page, which reads the path
            page = {"content-type": "text/html; charset=utf-8", "cache-control": "no-cache"}
            return HttpResponse(200, self.files.files["index.html"], page)
        suffix = os.path.splitext(name)[1].lower()
        kind = _MIME.get(suffix) or mimetypes.guess_type(name)[0] or "application/octet-stream"
        if kind.startswith("text/") or kind in ("application/json", "application/manifest+json", "image/svg+xml"):
            kind += "; charset=utf-8"
        cache = "public, max-age=31536000, immutable" if name.startswith("assets/") else "no-cache"
        return HttpResponse(200, body, {"content-type": kind, "cache-control": cache})
