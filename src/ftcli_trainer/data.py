"""Data: read the task's examples, tokenize them once, and cut length-bucketed batches.

Readers turn every problem in a user's file into one DataError line that names the file, the row and
the fix; nothing from deep inside csv/json/datasets reaches the user as a traceback.
"""

from __future__ import annotations

import codecs
import csv
import difflib
import fnmatch
import functools
import gzip
import io
import json
import logging
import math
import re
import shlex
import shutil
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ftcli_trainer import storage
from ftcli_trainer.config import TrainConfig, kept_train_rows, name_list
from ftcli_trainer.errors import DataError, first_line, one_line
from ftcli_trainer.tasks import BUNDLED_SAMPLE, TASKS, Task, bundled_sample_file

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

TRUE_VALUES = {"1", "1.0", "true", "yes"}
FALSE_VALUES = {"0", "0.0", "false", "no"}
NUMBER_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
# The rows are all kept anyway: a long text (a 5 MB review) in one CSV field is valid data.
CSV_FIELD_LIMIT = min(sys.maxsize, 2**31 - 1)


log = logging.getLogger("ftcli_trainer")


class Row(dict):
    """A JSON Lines row that knows its line in the file (blank lines are skipped, so rows and lines differ)."""

    __slots__ = ("line",)  # no __dict__ per row: 100 bytes each, 200 MB of a 2-million-row file's rows

    def __init__(self, *args: Any, line: int = 0) -> None:
        super().__init__(*args)
        self.line = line


class CsvRow(Row):
    """A CSV row that knows the line its record starts on, as an editor counts (the header is line 1; a quoted
    field can hold line breaks, and blank lines are skipped, so rows and lines differ)."""

    __slots__ = ()


@dataclass
class Examples:
    texts: list[str]
    pairs: list[str] | None
    labels: np.ndarray  # int64 [N] (single-label), float32 [N, L] (multi-label) or float32 [N] (regression)

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, idx: np.ndarray) -> Examples:
        return Examples(
            texts=[self.texts[i] for i in idx],
            pairs=[self.pairs[i] for i in idx] if self.pairs is not None else None,
            labels=self.labels[idx],
        )


@dataclass
class TaskData:
    train: Examples
    evals: dict[str, Examples]  # name -> examples; the first is the primary eval set
    label_names: list[str]  # regression: one name, the label column's
    multi_label: bool
    regression: bool = False
    # The rows left to train on before --max-train-samples or --fraction-of-train-data takes a subset of them (after the
    # hold-out): whether such an option keeps every row (checkpoint.record_train_rows)
    rows_before_subset: int | None = None
    # A Hub dataset's rows as loaded, every split the task reads (rows_digest): the fingerprint names a Hub dataset by
    # its name only, and a resume after the dataset changed on the Hub went on with other rows (checkpoint.
    # record_train_rows keeps it and compares it). None for files, whose content the fingerprint holds already.
    hub_rows: str | None = None


def rows_digest(sets: dict[str, Examples]) -> str:
    """A digest of the examples of each named set: their texts, pairs and labels, in order. What the run trains and
    scores on, whatever `datasets` version or cache loaded it (a loaded Dataset's _fingerprint follows its cache
    folder: a datasets upgrade, or a new Hub commit that changed only the dataset card, changes it with the same
    rows)."""
    import hashlib

    h = hashlib.sha256()

    def add(value: bytes) -> None:
        h.update(len(value).to_bytes(8, "little"))
        h.update(value)

    for name in sorted(sets):
        ex = sets[name]
        add(name.encode())
        add(len(ex).to_bytes(8, "little"))
        for column in (ex.texts, ex.pairs or []):
            add(len(column).to_bytes(8, "little"))
            for text in column:
                add(text.encode("utf-8", "surrogatepass"))
        labels = np.ascontiguousarray(ex.labels)
        add(f"{labels.dtype.str}{labels.shape}".encode())
        add(labels.tobytes())
    return "sha256:" + h.hexdigest()


# ----------------------------------------------------------------------------------------------
# Reading tables (CSV / JSON Lines, optionally gzip-compressed, local or gs://)


def _gzip_error(shown: str, e: BaseException) -> DataError:
    if isinstance(e, EOFError):
        return DataError(f"{shown} is not a valid gzip file (it ends early: truncated by a copy or a download?)",
                         hint="copy it again, or give the uncompressed file")
    return DataError(f"{shown} is not a valid gzip file ({e})", hint="re-create it, or give the uncompressed file")


# A gzip file's first two bytes (ID1 ID2, RFC 1952 2.3.1). No UTF-8 text starts with them (0x8b only continues a
# character), so a file is decompressed by what its bytes are, whatever its name says: a .csv.gz that is plain text
# (a browser decompressed the download and kept the name; Cloud Storage serves an object stored gzip-compressed with
# Content-Encoding: gzip decompressed, "decompressive transcoding", https://cloud.google.com/storage/docs/transcoding,
# read 2026-11-29) and a gzip file without .gz were "not a valid gzip file (Not a gzipped file (b'te'))" and "not
# UTF-8 (byte 0x8b on line 1); re-save it as UTF-8", though what they hold is unambiguous. The name still picks CSV,
# TSV or JSON Lines (under a .gz), which the bytes do not tell apart; a file that is neither (Parquet, a workbook) is
# told by its bytes too, and refused (_NOT_TEXT). So a .parquet (or .txt, or .xlsx) that holds CSV text is read as
# the CSV it is: no reader of Parquet is passed over, the trainer has none.
GZIP_MAGIC = b"\x1f\x8b"


class _GzipOf(gzip.GzipFile):
    """The decompressed bytes of the open file `f`, which it closes when it is closed (GzipFile(fileobj=f) leaves `f`
    open; gzip.open(path) opens the file a second time, and a named pipe's bytes once read are gone)."""

    def __init__(self, f: io.BufferedReader):
        super().__init__(fileobj=f, mode="rb")
        self._file = f

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._file.close()


def _open_bytes(path: Path) -> io.BufferedReader | _GzipOf:
    """`path`'s bytes, decompressed where they are gzip's (GZIP_MAGIC says why by the bytes, not by the name)."""
    f = open(path, "rb")
    try:
        gzipped = f.peek(len(GZIP_MAGIC))[:len(GZIP_MAGIC)] == GZIP_MAGIC  # (peek: a named pipe too)
    except BaseException:
        f.close()
        raise
    return _GzipOf(f) if gzipped else f


def _utf8_error(path: Path, shown: str, given: str | None = None, fmt: str | None = None) -> DataError:
    """The line and byte of the first invalid UTF-8 in `path`, found again by a second pass (the text was read
    in blocks, which know no lines): an error's path only. A UTF-8 sequence never holds a newline byte, so each
    line decodes on its own."""
    with _open_bytes(path) as raw:
        if other := _other_format(raw.read(8), shown, given, fmt):
            return other
        raw.seek(0)
        return _utf8_error_in(raw, shown)


# A file that is not text at all, told by its first bytes (the formats' magic numbers): "re-save it as UTF-8", what a
# text file in another encoding is told, is no way out for a Parquet file or a workbook. An .xlsx is a zip archive;
# an .xls an OLE2 compound file; UTF-16 text (Excel's "Unicode Text" export) starts with its byte order mark.
_NOT_TEXT = (
    (b"PAR1", "a Parquet file", "pandas.read_parquet(PATH).to_csv('train.csv', index=False)"),
    (b"ARROW1", "an Arrow/Feather file", "pandas.read_feather(PATH).to_csv('train.csv', index=False)"),
    (b"PK\x03\x04", "a zip archive (an Excel .xlsx is one)",
     "save the sheet as 'CSV UTF-8' (pandas: read_excel(PATH).to_csv('train.csv', index=False)), or unzip it "
     "and give the CSV inside"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "an Excel .xls workbook",
     "save the sheet as 'CSV UTF-8' (pandas: read_excel(PATH).to_csv('train.csv', index=False))"),
)


def _other_format(head: bytes, shown: str, given: str | None = None, fmt: str | None = None) -> DataError | None:
    """The one line for a file whose first bytes (decompressed, where they were gzip's) say it is no CSV or JSON Lines
    (nor UTF-8 text), else None. `given`: the file as its user named it, for the code that converts it (`shown` may
    be "--file NAME"; default `shown`); `fmt`: the format it is read as, where no name says it (_utf16_fix)."""
    if head.startswith(GZIP_MAGIC):  # (the bytes of a gzip file are decompressed once: these are a second one's)
        return DataError(f"{shown} is gzip-compressed twice (a gzip file inside a gzip file)",
                         hint="decompress it once, and give what that leaves")
    for magic, what, fix in _NOT_TEXT:
        if head.startswith(magic):
            fix = fix.replace("PATH", repr(given or shown))
            return DataError(f"{shown} is {what}, not CSV or JSON Lines", hint=f"convert it: {fix}")
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return DataError(f"{shown} is UTF-16 text, not UTF-8",
                         hint=f"re-save it as UTF-8 ({_utf16_fix(given or shown, fmt, 'UTF-16')})")
    return None


def _utf16_fix(name: str, fmt: str | None, codec: str) -> str:
    """How to re-save the UTF-16 file `name` as UTF-8, for its kind: Excel's way for a CSV (Excel's "Unicode Text"
    export is UTF-16, tab-separated), an editor's or iconv's for JSON Lines, which no spreadsheet writes (a .jsonl
    was told "in Excel: Save As 'CSV UTF-8'"). The kind is the name's (.csv/.tsv, .jsonl/.json/.ndjson), else the
    format it is read as (`fmt`, CSV by default). `codec`: iconv's name for what the file holds: UTF-16 where a
    byte order mark says which, UTF-16LE or UTF-16BE where none does (without a mark, iconv reads plain UTF-16 in
    an order of its own choosing: glibc 2.36's on x86-64 is little-endian, tried 2026-11-29, wrong for a
    big-endian file)."""
    base = name.lower().removesuffix(".gz")
    if base.endswith(".tsv"):
        return "in Excel: Save As 'CSV UTF-8', and give that .csv"
    if not (_is_jsonl(name) or fmt == "jsonl" and not base.endswith(".csv")):
        return "in Excel: Save As 'CSV UTF-8'"
    if storage.is_gcs(name) or name.lower().endswith(".gz") or name.startswith("-"):
        return f"in an editor: save with the encoding UTF-8; or with iconv -f {codec} -t UTF-8"
    path = Path(name)
    out = path.with_name(f"{path.stem}-utf8{path.suffix}")
    return (f"in an editor: save with the encoding UTF-8; or `iconv -f {codec} -t UTF-8 {shlex.quote(name)} > "
            f"{shlex.quote(str(out))}`")


# Bytes no UTF-8 text's first line holds: C0 controls other than the ASCII whitespace (tab, line feed, vertical tab,
# form feed, carriage return). Formats that are not text hold them from their first bytes (Parquet's page header after
# PAR1, a zip's PK\x03\x04); text in UTF-16 holds a NUL beside each ASCII character. Such a file whose bytes happen to
# be valid UTF-8 (a small uncompressed Parquet file, UTF-16 without a byte order mark) was read as text: "no data
# rows", "duplicate column names" or "line 6: fewer fields than the header's 2". A CSV whose first column is named
# PAR1 holds none. The vertical tab is text's: Word's line break within a paragraph (Shift+Enter), kept in text
# copied out of it; a CSV with classic Mac line ends (\r: one "first line" up to the first \n) holding one in any of
# its first rows was refused as "not text", which Python's csv reader, pandas and `datasets` read as one row.
_CONTROL = re.compile(rb"[\x00-\x08\x0e-\x1f]")


def _binary_error(head: bytes, shown: str, given: str | None = None, fmt: str | None = None) -> DataError | None:
    """The one line for a file whose first bytes (decompressed, where they were gzip's) are not UTF-8 text though
    they may decode as UTF-8: a control character in its first line (_CONTROL). None for text."""
    first = head.split(b"\n", 1)[0]
    if (found := _CONTROL.search(first)) is None:
        return None
    if other := _other_format(head, shown, given, fmt):
        return other
    sample = head[:400]
    odd, even = sample[1::2], sample[0::2]
    # (ASCII text's high bytes are its NULs: second in little-endian UTF-16, first in big-endian)
    if len(sample) >= 4 and (codec := "UTF-16LE" if odd.count(0) >= len(odd) / 2 and 0 not in even else
                             "UTF-16BE" if even.count(0) >= len(even) / 2 and 0 not in odd else None):
        return DataError(f"{shown} is UTF-16 text (with no byte order mark), not UTF-8",
                         hint=f"re-save it as UTF-8 ({_utf16_fix(given or shown, fmt, codec)})")
    return DataError(f"{shown} is not text: its first line holds the control byte 0x{first[found.start()]:02x} (a "
                     "binary file?)", hint="give a CSV or JSON Lines file, UTF-8 text")


UTF8_FIX = "re-save it as UTF-8"


def _utf8_error_in(lines: Iterable[bytes], shown: str, cut: bool = False) -> DataError:
    """The line and byte of the first invalid UTF-8 in `lines`; `cut`: the last line is cut short (the first bytes
    of a file), so a character cut in two at its end is none."""
    held = list(lines) if cut else None
    for n, line in enumerate(held if held is not None else lines, 1):
        try:
            codecs.getincrementaldecoder("utf-8")().decode(line, final=held is None or n < len(held))
        except UnicodeDecodeError as e:
            return DataError(f"{shown} is not UTF-8 (byte 0x{line[e.start]:02x} on line {n})", hint=UTF8_FIX)
    return DataError(f"{shown} is not UTF-8", hint=UTF8_FIX)


class _TextFile(io.TextIOWrapper):
    """A local file's text, read as it is used (a 2 GB CSV is not held as bytes, then as text, then as a buffer
    of 4 bytes a character, before its first row is parsed): a decoding or gzip problem met on the way is the
    one-line DataError that names the file."""

    def __init__(self, path: Path, shown: str, given: str | None = None, fmt: str | None = None):
        self._path, self._shown, self._given, self._fmt = path, shown, given, fmt
        try:
            raw = _open_bytes(path)
        except OSError as e:
            raise DataError(f"cannot read {shown}: {e.strerror or type(e).__name__}") from None
        self._gzipped = isinstance(raw, gzip.GzipFile)
        try:  # (peek: the bytes stay to be read, a named pipe's too; a gzip problem is the reading's to say)
            problem = _binary_error(raw.peek(HEAD_PEEK)[:HEAD_PEEK], shown, given, fmt)
        except (EOFError, OSError, zlib.error):
            problem = None
        if problem is not None:
            raw.close()
            raise problem
        super().__init__(raw, encoding="utf-8-sig", newline="")

    def _failed(self, e: BaseException) -> DataError:
        if isinstance(e, UnicodeDecodeError):
            if not Path(self._path).is_file():
                # A pipe (`--file /dev/stdin`, `<(iconv ...)`, a named pipe): its bytes once read are gone, so there
                # is no second pass to find the line; the second open failed ('File or stream is not seekable', said
                # as an unexpected error) or waited for a writer that had gone. The byte is the decoder's.
                return DataError(f"{self._shown} is not UTF-8 (byte 0x{e.object[e.start]:02x})", hint=UTF8_FIX)
            return _utf8_error(self._path, self._shown, self._given, self._fmt)
        if self._gzipped and isinstance(e, (EOFError, OSError, zlib.error)):
            return _gzip_error(self._shown, e)  # gzip.BadGzipFile is an OSError
        return DataError(f"cannot read {self._shown}: {getattr(e, 'strerror', None) or type(e).__name__}")

    def read(self, size: int | None = -1) -> str:
        try:
            return super().read(size)
        except (UnicodeDecodeError, EOFError, OSError, zlib.error) as e:
            raise self._failed(e) from None

    def readline(self, size: int = -1) -> str:  # type: ignore[override]  # typeshed: TextIOWrapper's is str
        try:
            return super().readline(size)
        except (UnicodeDecodeError, EOFError, OSError, zlib.error) as e:
            raise self._failed(e) from None

    def __next__(self) -> str:  # type: ignore[override]  # (as readline)
        try:
            return super().__next__()
        except (UnicodeDecodeError, EOFError, OSError, zlib.error) as e:
            raise self._failed(e) from None


# The first bytes of a file looked at for a binary format before it is read as text (_binary_error)
HEAD_PEEK = 4096


def open_text(path: Path, shown: str, given: str | None = None, fmt: str | None = None) -> io.TextIOBase:
    """A local file's text (decompressed where it is gzip's, UTF-8 with or without a BOM), read as it is iterated; a
    DataError naming `shown` otherwise (a file that is not text: what it is, and how to convert it, named as `given`,
    the file as its user named it, default `shown`, for the format it is read as, `fmt`, where its name says none).
    Close it when done (or use it in a `with`)."""
    return _TextFile(path, shown, given, fmt)


def _is_jsonl(path: str, fmt: str | None = None) -> bool:
    """Whether `path` is read as JSON Lines: by `fmt` where given (--train-file-format), else by its extension."""
    if fmt:
        return fmt == "jsonl"
    name = path.lower().removesuffix(".gz")
    return name.endswith((".jsonl", ".json", ".ndjson"))


def _separator(path: str) -> str:
    """The field separator of a CSV-format file: a tab in a .tsv (GLUE's files, a spreadsheet's "Tab delimited"
    export), else a comma. Quoted as CSV is (pandas' to_csv(sep="\t") writes it so)."""
    return "\t" if path.lower().removesuffix(".gz").endswith(".tsv") else ","


def read_rows(path: str, *, fmt: str | None = None, shown: str | None = None) -> tuple[list[str], list[dict]]:
    """(columns, rows) of a CSV or JSON Lines file; `fmt` forces "csv" or "jsonl"; `shown` names the file in
    errors (default: its path)."""
    shown = shown or path
    tmp = None
    try:
        if storage.is_gcs(path):
            tmp = storage.local_tmp("data")
            try:
                local = storage.download_file(path, tmp / Path(path).name)
            except Exception as e:  # noqa: BLE001 - any storage failure is reported as one line
                # By name, not by importing google.api_core here: where a google package is missing that would fail too.
                if type(e).__name__ == "NotFound" and type(e).__module__.startswith("google."):
                    # (it said "NotFound: 404 GET https://storage.googleapis.com/download/storage/v1/b/...?alt=media:
                    # ('Request failed with status code', 404, 'Expected one of', <HTTPStatus.OK: 200>, ...)")
                    raise DataError(f"data file {path} does not exist",
                                    hint=f"`gcloud storage ls {path.rsplit('/', 1)[0]}/` lists what is there") from None
                said = first_line(e, 300)
                raise DataError(f"cannot read {path}: {type(e).__name__}" + (f": {said}" if said else "")) from None
        else:
            local = Path(path).expanduser()
            if (missing := local_file_error(path)) is not None:
                raise missing
        with open_text(local, shown, path, fmt) as f:
            return rows_of(f, path, fmt=fmt, shown=shown)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)  # the rows are read: the downloaded copy is not needed


def rows_of(f: io.TextIOBase, path: str, *, fmt: str | None = None, shown: str | None = None
            ) -> tuple[list[str], list[dict]]:
    """read_rows' (columns, rows) of the text `f` of the file `path` (its extension picks the format, unless `fmt`),
    open already: read_rows', and that of a text its caller holds (ftcli predict's .tsv --file, read once)."""
    shown = shown or path
    if _is_jsonl(path, fmt):
        rows = _read_jsonl(f, shown, fmt)
    else:
        _refuse_json_lines_as_csv(f, shown, fmt)
        rows = _read_tsv(f, shown) if _separator(path) == "\t" else _read_csv(f, shown)
    if not rows and _is_jsonl(path, fmt):  # (the JSON Lines reader returns no rows only where no line holds any)
        raise DataError(f"{shown} is empty", hint="write one JSON object per line, one per example (e.g. "
                                                  '{"text": "a fine film", "label": "pos"})')
    if not rows:
        raise DataError(f"{shown} has no data rows")
    columns = list(rows[0].keys())
    return columns, rows


def local_file_error(path: str) -> DataError | None:
    """Why the local data file `path` cannot be read at all (a folder, or nothing there), or None."""
    local = Path(path).expanduser()
    if local.is_dir():
        return _folder_error(local, path)
    if not local.is_file():
        if (kind := not_a_regular_file(local)) is not None:
            # (`--train-file /dev/stdin`, `<(zcat data.csv.gz)`: "does not exist" of a pipe that was there)
            return DataError(f"data file {path} is {kind}, not a file", hint=NOT_A_FILE_HINT)
        return DataError(f"data file {path} does not exist")
    return None


NOT_A_FILE_HINT = "a data file is read more than once (its columns, then its rows): save it to a file and give that"


def not_a_regular_file(path: Path) -> str | None:
    """What `path` is where it is there but neither a file nor a folder (a pipe, a device, a socket), else None."""
    import os
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return "a pipe" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"


def _folder_error(folder: Path, path: str) -> DataError:
    """A folder given as a data file ("does not exist (it is a folder)" said neither): the data files in it to pick
    from (a dataset's folder, train.csv and validation.csv)."""
    kinds = (".csv", ".tsv", ".jsonl", ".json", ".ndjson")
    try:
        found = sorted(f.name for f in folder.iterdir() if f.is_file() and not f.name.startswith(".")
                       and f.name.lower().removesuffix(".gz").endswith(kinds))
    except OSError:
        found = []
    if not found:
        return DataError(f"data file {path} is a folder, and holds no .csv, .tsv or .jsonl file",
                         hint="give a data file, CSV or JSON Lines")
    shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
    example = next((f for f in found if "train" in f.lower()), found[0])
    return DataError(f"data file {path} is a folder (data files in it: {shown})",
                     hint=f"give one file in it, e.g. {shlex.quote(str(Path(path) / example))}")


def _use_format(fmt: str | None, wanted: str) -> str:
    """How to read a file as `wanted` ("csv"/"jsonl"): with --task csv/jsonl the task picks the format of both
    files; otherwise (a named task) the file's extension does."""
    if fmt:
        return f"use --task {wanted} (the train and eval files take the same format)"
    return f"name it .{wanted} (without --task csv or --task jsonl, the file's extension picks its format)"


def _first_line(f: io.TextIOBase) -> str:
    """The first non-blank line of `f` (stripped; "" when there is none), leaving `f` where it was."""
    pos = f.tell()
    try:
        return next((line.strip() for line in f if line.strip()), "")
    finally:
        f.seek(pos)


def _refuse_json_lines_as_csv(f: io.TextIOBase, shown: str, fmt: str | None) -> None:
    """A JSON Lines file read as CSV gives misleading lines ("fewer fields than the header's 3"): say so first.
    It looks like JSON Lines when its first line is a JSON object, or starts with `{` in a .jsonl/.json file. A JSON
    array of objects (json.dump's, pandas' to_json(orient="records")) named .csv was "has duplicate column names:
    "label": "pos"}": it is said as the JSON Lines reader says it (_refuse_json_array)."""
    line = _first_line(f)
    if line.startswith("["):
        _refuse_json_array(f, shown, _use_format(fmt, "jsonl"))
    if not line.startswith("{"):
        return
    try:
        obj = json.loads(line)
    except ValueError:
        obj = None
    if isinstance(obj, dict) or _is_jsonl(shown):
        raise DataError(f"{shown} looks like JSON Lines, not CSV", hint=_use_format(fmt, "jsonl"))


QUOTE_FIX = 'put a field that holds quotes in quotes, and double each quote inside it: "say ""hi"" here"'


def _csv_error(shown: str, e: csv.Error, start: int, line: int) -> DataError:
    """The one line for a csv.Error. `start` is the line the bad record starts on, `line` the line the reader
    stopped on: a stray quote opens a field that runs on (to the next quote, or the end of the file), so the
    line to fix is where the record starts."""
    why = str(e)
    if why == "unexpected end of data":
        return DataError(f"{shown} is not valid CSV (line {start}: a quoted field opens here and is never "
                         f"closed)", hint=QUOTE_FIX)
    fix = QUOTE_FIX if '"' in why else None
    if line > start:
        return DataError(f"{shown} is not valid CSV (line {start}: a quoted field opens here and runs on to line "
                         f"{line}, where {why})", hint=fix)
    return DataError(f"{shown} is not valid CSV (line {line}: {why})", hint=fix)


def _read_tsv(f: io.TextIOBase, shown: str) -> list[dict]:
    """A .tsv's rows: quoted as CSV is (pandas' to_csv(sep="\t")), or else with no quoting at all, as GLUE's files
    are (MNLI's hypothesis `"Hi" is a greeting.` opens a quote that CSV's rules cannot close; pandas reads those
    with quoting=csv.QUOTE_NONE). The second reading is tried only when the first fails, and says nothing."""
    try:
        return _read_csv(f, shown, "\t")
    except DataError as e:
        f.seek(0)
        try:
            return _read_csv(f, shown, "\t", quoting=False)
        except DataError:
            raise e from None


def _read_csv(f: io.TextIOBase, shown: str, sep: str = ",", quoting: bool = True) -> list[dict]:
    if csv.field_size_limit() < CSV_FIELD_LIMIT:
        csv.field_size_limit(CSV_FIELD_LIMIT)
    reader = csv.reader(f, strict=True, delimiter=sep, quoting=csv.QUOTE_MINIMAL if quoting else csv.QUOTE_NONE)
    start = 1  # the line the record being read starts on (csv.DictReader's line_num lags a record behind)
    try:
        header = _csv_header(reader, shown, sep)
        start = reader.line_num + 1
        records, lines = [], []
        rows: list[dict] = []
        # Every column named (the usual case): a row is made as its record is read, not after all of them are
        # (a 2-million-row file held both at once).
        direct = all(c.strip() for c in header)
        for record in reader:
            line, start = start, reader.line_num + 1
            if not record:  # a blank line
                continue
            if len(record) > len(header):
                raise DataError(f"{shown} line {line}: more fields than the header's {len(header)}",
                                hint=f"quote text that contains {SEPARATOR_NAMES[sep]}s")
            if len(record) < len(header):
                raise DataError(f"{shown} line {line}: fewer fields than the header's {len(header)}")
            if direct:
                rows.append(CsvRow(zip(header, record, strict=True), line=line))
            else:
                records.append(record)
                lines.append(line)
    except csv.Error as e:
        raise _csv_error(shown, e, start, reader.line_num) from None
    if not rows and not records:
        # "X has no data rows" said neither what the file held nor what to do (a header written alone, an export
        # that kept no row): its columns, which also show whether it is the file meant
        raise DataError(f"{shown} has only its header line (columns: {_shown_columns(header)}) and no data rows",
                        hint="add one row per example below the header line, one field per column")
    if direct:
        return rows
    return [CsvRow(zip(header, record, strict=True), line=line)
            for record, line in zip(_drop_unnamed(header, records, shown), lines, strict=True)]


SEPARATOR_NAMES = {",": "comma", "\t": "tab", ";": "semicolon", "|": "pipe"}


def _csv_header(reader: Iterator[list[str]], shown: str, sep: str = ",") -> list[str]:
    """The header row of a CSV reader (fields separated by `sep`), or the DataError that says what is wrong with it."""
    header = next(reader, None)
    if not header:
        raise DataError(f"{shown} is empty", hint="write a header row naming the columns (e.g. text,label), then one "
                                                  "row per example")
    if len(header) == 1 and (other := next((s for s in SEPARATOR_NAMES if s != sep and s in header[0]), None)):
        # one column holding the separators: the hints below (no column 'text', quote commas) mislead
        if other == "\t":
            fix = "name it .tsv (a .tsv file's fields are separated by tabs), or save it with commas"
        elif other == ",":
            fix = "name it .csv, or save it with tabs"
        else:
            fix = f"save it with {SEPARATOR_NAMES[sep]}s, or as JSON Lines"
        reads = "comma-separated CSV" if sep == "," else "a .tsv as tab-separated"
        raise DataError(f"{shown} looks {SEPARATOR_NAMES[other]}-separated (its header is one column, "
                        f"{header[0]!r}), and ftcli reads {reads}", hint=fix)
    if not any(c.strip() for c in header):
        raise DataError(f"{shown}: its first line names no column",
                        hint="write a header row naming the columns (e.g. text,label), then one row per example")
    dupes = sorted({c for c in header if c.strip() and header.count(c) > 1})
    if dupes:
        raise DataError(f"{shown} has duplicate column names: {', '.join(dupes)}")
    return header


def _drop_unnamed(header: list[str], records: list[list[str]], shown: str) -> list[list[str]]:
    """Columns with no name and no values (a spreadsheet's export ends every line with `,,`) are left out, as
    nothing can name them; `header` is changed in place. Unnamed columns that hold values (pandas' index) stay,
    one at most: two of them would be two columns named ''."""
    unnamed = [j for j, c in enumerate(header) if not c.strip()]
    empty = [j for j in unnamed if not any(r[j].strip() for r in records)]
    if len(unnamed) - len(empty) > 1:
        kept = [j + 1 for j in unnamed if j not in empty]
        raise DataError(f"{shown}: columns {', '.join(map(str, kept))} have no name in the header line but hold "
                        "values", hint="give each a name in the header line (or delete the columns)")
    if not empty:
        return records
    keep = [j for j in range(len(header)) if j not in empty]
    header[:] = [header[j] for j in keep]
    return [[r[j] for j in keep] for r in records]


def _looks_like_csv(line: str, shown: str) -> bool:
    """Whether the first line of a file read as JSON Lines, which is no JSON object, is a CSV header."""
    name = shown.lower().removesuffix(".gz")
    return not line.lstrip().startswith(("{", "[")) and ("," in line or name.endswith(".csv"))


def _refuse_json_array(f: io.TextIOBase, shown: str, as_csv: str | None = None) -> None:
    """A .json file that is one JSON array (json.dump, pandas' to_json(orient="records")) read as JSON Lines failed
    on its first line ("not valid JSON (Expecting value)", or "got list"), without saying what to do."""
    if not _first_line(f).startswith("["):
        return
    pos = f.tell()
    try:
        whole = json.loads(f.read())
    except ValueError:
        return
    finally:
        f.seek(pos)
    if isinstance(whole, list) and whole and all(isinstance(row, dict) for row in whole):
        if as_csv is not None:  # (read as CSV: `as_csv` says how to have it read as JSON Lines)
            raise DataError(f"{shown} is one JSON array, not CSV",
                            hint=f"write it as JSON Lines, one object per line (pandas: df.to_json(path, "
                                 f"orient='records', lines=True)), and {as_csv}")
        raise DataError(f"{shown} is one JSON array, not JSON Lines",
                        hint="write one object per line (pandas: df.to_json(path, orient='records', lines=True))")


def _json_error(shown: str, n: int, line: str, e: json.JSONDecodeError) -> DataError:
    """Line `n` of a JSON Lines file is not JSON. json's own words end in " at" where its position follows ("Invalid
    control character at"): the column is said. A control character written as it is in a string (a vertical tab or
    form feed copied from Word or a PDF by a writer other than json.dumps) is said as such: "All Unicode characters
    may be placed within the quotation marks, except for the characters that MUST be escaped: quotation mark, reverse
    solidus, and the control characters (U+0000 through U+001F)" (RFC 8259, section 7,
    https://www.rfc-editor.org/rfc/rfc8259#section-7, read 2026-11-29); `datasets`' JSON loader refuses it too."""
    if e.msg.startswith("Invalid control character") and e.pos < len(line):
        code = ord(line[e.pos])
        return DataError(f"{shown} line {n} is not valid JSON: a string holds the control character 0x{code:02x} "
                         f"unescaped (column {e.colno})",
                         hint=f"write it escaped, as \\u{code:04x} (json.dumps and pandas' to_json do), or remove it")
    return DataError(f"{shown} line {n} is not valid JSON ({e.msg.removesuffix(' at')} at column {e.colno})",
                     hint='write one JSON object per line (e.g. {"text": "a fine film", "label": "pos"})')


def _read_jsonl(f: io.TextIOBase, shown: str, fmt: str | None = None) -> list[dict]:
    _refuse_json_array(f, shown)
    rows: list[dict] = []
    for n, line in enumerate(f, 1):
        if not line.strip():
            continue
        if not rows and _looks_like_csv(line, shown):
            try:
                first = json.loads(line)
            except json.JSONDecodeError:
                first = None
            if not isinstance(first, dict):
                text = line.strip()
                text = text if len(text) <= 60 else text[:57] + "..."
                raise DataError(f"{shown} looks like CSV, not JSON Lines (line {n} is {text!r})",
                                hint=_use_format(fmt, "csv"))
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise _json_error(shown, n, line, e) from None
        if not isinstance(obj, dict):
            raise DataError(f"{shown} line {n}: expected a JSON object per line, got {type(obj).__name__}")
        rows.append(Row(obj, line=n))
    return rows


# ----------------------------------------------------------------------------------------------
# Turning rows into examples


def _shown_columns(columns: list[str]) -> str:
    # quoted when a name has spaces at its ends (`text, label`) or a comma (`toxic, severe`): otherwise they do not
    # show, or one column reads as two
    return ", ".join(repr(c) if c != c.strip() or "," in c else c for c in columns)


def _column_fix(col: str, columns: list[str], csv_file: bool, fix: str | None, taken: Iterable[str] = ()) -> str:
    """After "has no column 'x' (columns: ...)": spaces around the names (`text, label`), or the closest name that
    no other role takes (the text column is no label column's fix). `fix`: a flag to pass, or a sentence."""
    if any(c.strip() == col for c in columns):
        where = "remove the spaces around the commas in the header" if csv_file else "remove them from the keys"
        return f"column names must not start or end with spaces: {where}"
    close = difflib.get_close_matches(col, [c for c in columns if c not in set(taken)], n=1)
    if close and fix and "NAME" in fix:
        flag = fix.split(" (")[0]  # "--label-column NAME (or --label-columns ...)": the alternative is noise here
        # quoted as a shell reads it: "pass --text-column Review Text" (or 'Text ', whose space does not show) named
        # another column when copied
        return f"did you mean {close[0]!r}? pass {flag.replace('NAME', shlex.quote(close[0]))}"
    if close:
        return f"did you mean {close[0]!r}?"
    if fix and not fix.startswith("--"):
        return fix
    return f"pass {fix or 'the right column name'}"


def require_columns(columns: list[str], wanted: list[str], shown: str, hint: dict[str, str],
                    csv_file: bool = True, taken: Iterable[str] = ()) -> None:
    """Refuse data without one of the `wanted` columns, naming the columns it has and a fix (a close name, or the
    flag in `hint`); `taken` are columns that cannot be the answer. The trainer's reader and `ftcli evaluate`."""
    for col in wanted:
        if col not in columns:
            raise DataError(f"{shown} has no column {col!r} (columns: {_shown_columns(columns)})",
                            hint=_column_fix(col, columns, csv_file, hint.get(col), {*wanted, *taken}))


def resolve_label_columns(spec: str, columns: list[str], exclude: set[str], shown: str,
                          csv_file: bool = True) -> list[str]:
    # a JSON list names columns whose names hold a comma (config refused a broken one before any data was read)
    parts = [p.strip() for p in name_list(spec, "--label-columns")]
    out: list[str] = []
    for p in parts:
        if p in columns:
            # a column's own name first: 'toxic[1]' or 'spam?' is a name before it is a glob (as a glob 'toxic[1]'
            # matched only a column 'toxic1', and the data was refused)
            if p not in out:
                out.append(p)
        elif any(ch in p for ch in "*?["):
            matched = [c for c in columns if fnmatch.fnmatchcase(c, p) and c not in exclude]
            if not matched:
                raise DataError(f"--label-columns {p!r} matches no column of {shown} (columns: {', '.join(columns)})")
            out += [c for c in matched if c not in out]
        else:
            # 'toxic, severe,insult' split a column whose name holds a comma: say how to name it whole
            whole = {x.strip(): c for c in columns if "," in c for x in c.split(",")}
            named = list(dict.fromkeys(whole.get(q, q) for q in parts))
            fix = (f"a column whose name holds a comma is named in a JSON list: --label-columns "
                   f"{shlex.quote(json.dumps(named))}" if p in whole
                   else _column_fix(p, columns, csv_file, '--label-columns with the right names'))
            raise DataError(f"{shown} has no label column {p!r} (columns: {_shown_columns(columns)})", hint=fix)
    if not out:
        raise DataError("--label-columns names no column")
    return out


def row_position(rows: list[dict], i: int) -> str:
    """Where row i is, as the user would look for it: its line in a CSV or JSON Lines file (where a CSV record starts),
    the row of a Hub dataset."""
    r = rows[i]
    return f"line {r.line}" if isinstance(r, Row) else f"row {i + 1}"


def _text(value: object, where: str, col: str) -> str:
    if value is None or (isinstance(value, str) and not value.strip()):
        raise DataError(f"{where}: empty text in column {col!r}", hint=ROW_FIX)
    if isinstance(value, (list, dict)):
        # str() gave Python's repr ("['a', 'film']"), trained on as if it were the text
        kind = "list" if isinstance(value, list) else "object"
        raise DataError(f"{where}: the text in column {col!r} is a JSON {kind}, not a string",
                        hint="write each text as one string (join a list of tokens with spaces)")
    return value if isinstance(value, str) else str(value)


def label_key(value: object) -> tuple[str, str]:
    """(kind, class name) of one label value. Kinds are "number", "name" and "boolean"; numbers that are equal
    are one class whatever their spelling (1, 1.0, "1.0" -> "1"), so a CSV and a JSON file agree."""
    if isinstance(value, bool):
        return "boolean", str(value).lower()
    if isinstance(value, str):
        text = value.strip()
        if not NUMBER_RE.fullmatch(text):
            return "name", text
        number: object = int(text) if text.lstrip("+-").isdigit() else float(text)
    else:
        number = value
    if isinstance(number, float):
        if not math.isfinite(number):
            return "name", str(value).strip()
        if number.is_integer():
            number = int(number)
    return "number", str(number)


KIND_WORDS = {"number": "numbers", "name": "names", "boolean": "booleans"}


def _empty(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


ROW_FIX = "fill it in, or remove the row"  # (a row's empty text or label: the fix, for one row or several)


def _first_of_several(rows: list[dict], idx: list[int], check: Callable[[int], object]) -> None:
    """Raise the DataError that `check` raises for row idx[0], saying how many more rows (idx[1:]) have the same
    problem, so that they are not found one run at a time (a scraped file with 300 empty texts took 300 runs)."""
    if not idx:
        return
    try:
        check(idx[0])
    except DataError as e:
        if len(idx) < 2:
            raise
        more = ", ".join(row_position(rows, i) for i in idx[1:4]) + (", ..." if len(idx) > 4 else "")
        n = len(idx) - 1
        raise DataError(f"{e} ({'so is 1 more row' if n == 1 else f'so are {n} more rows'}: {more})",
                        hint="fill them in, or remove those rows" if e.hint == ROW_FIX else e.hint) from None


def _missing(value: object) -> bool:
    """A label cell with nothing in it: absent, null, blank, or NaN (a spreadsheet's or pandas' empty cell)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return True
    return isinstance(value, str) and value.strip().lower() in ("", "nan")


def _label_value(value: object, where: str, col: str) -> str | int | float | bool:
    """A single-label value, or the one-line reason it cannot be one."""
    if value is None:
        raise DataError(f"{where}: no {col!r} (every example needs a label)",
                        hint=f"add a {col!r} to it, or pass --label-column with the field that holds the labels")
    if isinstance(value, str) and not value.strip():
        raise DataError(f"{where}: empty label in column {col!r}", hint=ROW_FIX)
    if (isinstance(value, float) and not math.isfinite(value)) or (isinstance(value, str)
                                                                   and value.strip().lower() == "nan"):
        # JSON's NaN, a spreadsheet's export of an empty cell: a missing label, not a class named "nan"
        raise DataError(f"{where}: label {value!r} in column {col!r} is a missing value",
                        hint=ROW_FIX)
    if not isinstance(value, (str, int, float, bool)):
        raise DataError(f"{where}: label {value!r} is not a name, a number or a list of names")
    return value


def infer_label_names(values: list, positions: list[str], shown: str) -> list[str]:
    """The classes seen, in a stable order (numerically when they are numbers). Labels of different kinds
    cannot be told apart ("neg", "1", "0", "pos": is 1 "pos" or a fifth class?): that is an error, naming each
    kind's first value at its place in `positions` (a file's line, a Hub dataset's row) in `shown`."""
    first: dict[str, int] = {}
    keys = []
    for i, v in enumerate(values):
        kind, key = label_key(v)
        first.setdefault(kind, i)
        keys.append(key)
    if len(first) > 1:
        kinds = [k for k in KIND_WORDS if k in first]
        examples = ", ".join(f"{positions[first[k]]}: {values[first[k]]!r}" for k in kinds)
        raise DataError(f"{shown}: labels mix {' and '.join(KIND_WORDS[k] for k in kinds)} ({examples})",
                        hint="make every label a name (or every label a number), or pass --label-names in id order "
                             "(numbers are then ids)")
    unique = sorted(set(keys))
    if "number" in first:
        unique.sort(key=float)
    else:
        # "Positive" and "positive" are two classes, as written; a typo would split one class silently
        spellings: dict[str, list[str]] = {}
        for name in unique:
            spellings.setdefault(name.casefold(), []).append(name)
        for same in (v for v in spellings.values() if len(v) > 1):
            log.warning(
                "%s: the labels %s differ only in case, so they are %d classes; if they are one, write them alike "
                "(or give --label-names)", shown, ", ".join(map(repr, same)), len(same))
    return unique


def _regression_fix(cfg: TrainConfig) -> str:
    """The end of a hint on a regression's targets: how to leave regression, where a user can. --task stsb is a
    regression by itself, and "drop --regression" named an option its user never gave."""
    if TASKS[cfg.task].regression:
        return f" (--task {cfg.task} is a regression)"
    return ", or drop --regression to learn classes"


def _target(value: object, where: str, col: str, cfg: TrainConfig) -> float:
    """A regression target: a finite number (a JSON number or a numeric string), or the line that says why not."""
    if value is None:
        raise DataError(f"{where}: no {col!r} (every example needs a target)",
                        hint=f"add a {col!r} to it, or pass --label-column with the field that holds the targets")
    if isinstance(value, str) and NUMBER_RE.fullmatch(value.strip()):
        return float(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    if isinstance(value, str) and not value.strip():
        raise DataError(f"{where}: empty target in column {col!r}", hint=ROW_FIX)
    raise DataError(f"{where}: target {value!r} in column {col!r} is not a finite number",
                    hint=f"a regression needs a number in every row: fix the row{_regression_fix(cfg)}")


def _single_label_ids(values: list, names: list[str], wheres: list[str], ids_ok: bool = True) -> np.ndarray:
    """Class ids of `values`. With `ids_ok` (the names were given: --label-names or the task's own), a whole number
    that is no class name is an id; names read off the training data give no id order to map numbers onto."""
    index: dict[str, int] = {}
    for i, n in enumerate(names):
        index.setdefault(label_key(n)[1], i)
    names_numeric = all(label_key(n)[0] == "number" for n in names)
    ids = np.empty(len(values), dtype=np.int64)
    for i, v in enumerate(values):
        kind, key = label_key(v)
        if key in index:
            ids[i] = index[key]
            continue
        # With named classes, a whole number is an id (Hub datasets store labels as ids).
        if (ids_ok and kind == "number" and not names_numeric and key.lstrip("-").isdigit()
                and 0 <= int(key) < len(names)):
            ids[i] = int(key)
            continue
        if kind == "number" and not names_numeric and ids_ok:
            # the names were given (--label-names, or the task's own): a number is an id, and this one is none
            raise DataError(f"{wheres[i]}: label {key!r} is a number, so a class id, but the {len(names)} label "
                            f"names ({', '.join(names)}) have ids 0 to {len(names) - 1}",
                            hint="ids start at 0: fix the row, give a name for every id, or write the labels as "
                                 "names")
        if kind == "number" and not names_numeric:
            raise DataError(f"{wheres[i]}: label {key!r} is a number, but the training data's labels are names "
                            f"({', '.join(names)})",
                            hint="write the names here too, or pass --label-names in id order (numbers are then ids)")
        raise _not_in_label_set(wheres[i], key, names, "row")
    return ids


EVERY_LABEL = "pass --label-names with every label"  # (a training run's fix; ftcli evaluate says its own)


def _not_in_label_set(where: str, key: str, names: list[str], row: str) -> DataError:
    fix = f"fix the {row} or {EVERY_LABEL}"
    same = [n for n in names if label_key(n)[1].casefold() == key.casefold()]
    if same:  # `Positive` in the eval file, `positive` in the training file
        fix = f"labels are case-sensitive: write {same[0]!r}"
    return DataError(f"{where}: label {key!r} is not in the label set ({', '.join(names)})", hint=fix)


def _list_labels(values: list, names: list[str] | None, wheres: list[str], col: str, shown: str,
                 lists_expected_from: str | None) -> tuple[np.ndarray, list[str]]:
    """Multi-label from JSON lists (`"label": ["sports", "tech"]`, `[]` for none): a 0/1 matrix."""
    keys: list[list[str]] = []
    for i, v in enumerate(values):
        if not isinstance(v, list):
            why = lists_expected_from or "other labels are lists"
            raise DataError(f"{wheres[i]}: label {v!r} in {col!r} is not a list, but {why}",
                            hint="give every example a list of labels ([] for none)")
        row = []
        for item in v:
            if not isinstance(item, (str, int, float)) or isinstance(item, bool) or not str(item).strip():
                raise DataError(f"{wheres[i]}: {item!r} in the label list is not a label name")
            row.append(label_key(item)[1])
        keys.append(row)
    if names is None:
        names = sorted({k for row in keys for k in row})
        if not names:
            raise DataError(f"{shown}: every label list is empty; there is nothing to learn")
    index = {label_key(n)[1]: j for j, n in enumerate(names)}
    labels = np.zeros((len(values), len(names)), dtype=np.float32)
    for i, row in enumerate(keys):
        for k in row:
            if k not in index:
                raise _not_in_label_set(wheres[i], k, names, "line")
            labels[i, index[k]] = 1.0
    return labels, list(names)


def _check_columns(columns: list[str], cfg: TrainConfig, shown: str, csv_file: bool) -> None:
    """The text (and pair) column, and a single-label file's label column, are among `columns`."""
    hint = {cfg.text_column: "--text-column NAME",
            cfg.label_column: "--label-column NAME (or --label-columns for multi-label)"}
    if cfg.text_pair_column:
        hint[cfg.text_pair_column] = "--text-pair-column NAME"
    wanted = [cfg.text_column] + ([cfg.text_pair_column] if cfg.text_pair_column else [])
    if not cfg.multi_label:
        wanted.append(cfg.label_column)
    require_columns(columns, wanted, shown, hint, csv_file)


def _label_columns(columns: list[str], cfg: TrainConfig, shown: str, csv_file: bool,
                   label_names: list[str] | None) -> list[str]:
    """A multi-label file's label columns: `label_names` (the training file's), else --label-columns' names and
    globs resolved against `columns`."""
    exclude = {cfg.text_column, cfg.text_pair_column or "", "id", "idx", ""}  # "": pandas' unnamed index column
    label_cols = label_names or resolve_label_columns(cfg.label_columns or "", columns, exclude, shown, csv_file)
    # The eval file's label columns are the training file's: add the missing one, no other column stands in.
    need = f"every file needs the training data's label columns ({', '.join(label_cols)})"
    require_columns(columns, label_cols, shown, dict.fromkeys(label_cols, need), csv_file,
                     taken=[c for c in exclude if c])
    return label_cols


def rows_to_examples(rows: list[dict], columns: list[str], cfg: TrainConfig, shown: str,
                     label_names: list[str] | None, lists: bool | None = None) -> tuple[Examples, list[str]]:
    """Examples and label names from rows. Single-label rows give int64 ids; `--label-columns` or JSON lists of
    labels give a float32 0/1 matrix; `--regression` a float32 target per row (named after its column).
    `lists` says whether label lists are expected (None: whatever the data has; the eval file follows the
    training file)."""
    csv_file = bool(rows) and (isinstance(rows[0], CsvRow) or not isinstance(rows[0], Row))
    _check_columns(columns, cfg, shown, csv_file)
    wheres = [f"{shown} {row_position(rows, i)}" for i in range(len(rows))]
    for c in filter(None, (cfg.text_column, cfg.text_pair_column)):
        _first_of_several(rows, [i for i, r in enumerate(rows) if _empty(r.get(c))],
                          functools.partial(lambda i, col: _text(rows[i].get(col), wheres[i], col), col=c))
    texts = [_text(r.get(cfg.text_column), wheres[i], cfg.text_column) for i, r in enumerate(rows)]
    pairs = None
    if cfg.text_pair_column:
        pairs = [_text(r.get(cfg.text_pair_column), wheres[i], cfg.text_pair_column) for i, r in enumerate(rows)]
    if cfg.multi_label:
        label_cols = _label_columns(columns, cfg, shown, csv_file, label_names)
        labels = np.zeros((len(rows), len(label_cols)), dtype=np.float32)
        for i, r in enumerate(rows):
            for j, c in enumerate(label_cols):
                v = r.get(c)
                key = str(v).strip().lower() if v is not None else ""
                if key in TRUE_VALUES:
                    labels[i, j] = 1.0
                elif not key or key == "nan":
                    raise DataError(f"{wheres[i]}: no value in label column {c!r}",
                                    hint="multi-label columns need a 0 or 1 in every row: fill it in, or remove "
                                         "the row")
                elif key not in FALSE_VALUES:
                    raise DataError(f"{wheres[i]}: label column {c!r} holds {v!r}; multi-label columns "
                                    f"must be 0 or 1")
        if label_names is None and not labels.any():  # the training file; as for JSON lists that are all []
            raise DataError(f"{shown}: every label column ({', '.join(label_cols)}) is 0 in every row; there is "
                            "nothing to learn", hint="check that --label-columns names the columns of the labels")
        return Examples(texts, pairs, labels), label_cols
    col = cfg.label_column
    values = [r.get(col) for r in rows]
    if len(rows) > 1 and all(_missing(v) for v in values):
        # (a spreadsheet column left empty, or the wrong column): "line 2: empty label ...; fill it in or remove the
        # row" sent the user to fix rows one at a time
        what = "targets" if cfg.regression else "labels"
        others = any(c not in (cfg.text_column, cfg.text_pair_column, col) for c in columns)
        fix = (f"pass --label-column with the column that holds the {what} (columns: {_shown_columns(columns)})"
               if others else f"fill in the {what}")
        raise DataError(f"{shown}: column {col!r} is empty in all {len(rows)} rows", hint=fix)
    _first_of_several(rows, [i for i, v in enumerate(values) if _missing(v)],
                      lambda i: (_target(values[i], wheres[i], col, cfg) if cfg.regression
                                 else _label_value(values[i], wheres[i], col)))
    if cfg.regression:
        targets = np.array([_target(v, wheres[i], col, cfg) for i, v in enumerate(values)], dtype=np.float32)
        return Examples(texts, pairs, targets), [col]
    first_list = next((i for i, v in enumerate(values) if isinstance(v, list)), None)
    if lists or (lists is None and first_list is not None):
        labels, names = _list_labels(values, label_names, wheres, col, shown,
                                     "the training data's labels are lists" if lists else None)
        return Examples(texts, pairs, labels), names
    if first_list is not None:
        raise DataError(f"{wheres[first_list]}: label {values[first_list]!r} is a list, but the training data has "
                        f"one label per example")
    values = [_label_value(v, wheres[i], col) for i, v in enumerate(values)]
    names = label_names or infer_label_names(values, [row_position(rows, i) for i in range(len(rows))], shown)
    if label_names is None:  # the training file's names, read off it
        _warn_named_ids(rows, columns, cfg, names, values)
    ids_ok = bool(cfg.label_names or TASKS[cfg.task].labels)
    return Examples(texts, pairs, _single_label_ids(values, names, wheres, ids_ok)), names


def _warn_named_ids(rows: list[dict], columns: list[str], cfg: TrainConfig, names: list[str], values: list) -> None:
    """Labels that are numbers (a Hub dataset's ids, exported) beside a column that names each of them, one name a
    number (MNLI's `label_name`): the model would answer '0', '1', '2', and `ftcli predict` print them. Said, with the
    option that trains on the names instead."""
    if not names or not all(label_key(n)[0] == "number" for n in names):
        return
    keys = [label_key(v)[1] for v in values]
    for c in columns:
        if c in (cfg.text_column, cfg.text_pair_column, cfg.label_column):
            continue
        named: dict[str, str] = {}
        for key, row in zip(keys, rows, strict=True):
            v = row.get(c)
            if not isinstance(v, str) or label_key(v)[0] != "name" or named.setdefault(key, v.strip()) != v.strip():
                break
        else:
            if len(named) == len(names) and len(set(named.values())) == len(names):
                in_order = [named[label_key(n)[1]] for n in names]
                listed = ",".join(in_order) if not any("," in n for n in in_order) else json.dumps(in_order)
                log.warning("the labels in %r are numbers (%s), and column %r names each of them (%s): the model would "
                            "answer %s; to have it answer the names, pass --label-column %s (or --label-names %s)",
                            cfg.label_column, ", ".join(names[:5]) + (", ..." if len(names) > 5 else ""), c,
                            ", ".join(f"{n} = {m!r}" for n, m in zip(names[:5], in_order, strict=False))
                            + (", ..." if len(names) > 5 else ""),
                            ", ".join(repr(n) for n in names[:3]) + (", ..." if len(names) > 3 else ""),
                            shlex.quote(c), shlex.quote(listed))
                return


# ----------------------------------------------------------------------------------------------
# Task loading


def bundled_sample_available() -> bool:
    return bundled_sample_file("sst2_train.csv.gz").is_file()


# A data file this big takes a while to read (about 20 s a GB on 2 cores; a gs:// one is downloaded first): said, so
# that the log (Cloud Logging's, or `ftcli local`'s terminal) does not stop for a minute before the summary.
SAY_READING_BYTES = 64 * 1024 * 1024


def _say_reading(path: str) -> None:
    try:
        if storage.is_gcs(path):
            bucket, name = storage.split_gcs(path)
            blob = storage._client().bucket(bucket).get_blob(name)
            size = blob.size if blob is not None else None
        else:
            size = Path(path).expanduser().stat().st_size
    except Exception:  # noqa: BLE001 - only a progress line: reading the file says what is wrong with it
        return
    if size is not None and size >= SAY_READING_BYTES:
        log.info("reading %s (%s)", path, storage.size_text(size))


def _load_files(cfg: TrainConfig, task: Task, train_path: str, eval_paths: dict[str, str],
                fmt: str | None) -> tuple[Examples, dict[str, Examples], list[str]]:
    names: list[str] | None = list(cfg.label_names or task.labels) or None
    if cfg.multi_label:
        names = None
    _say_reading(train_path)
    columns, rows = read_rows(train_path, fmt=fmt)
    train, names = rows_to_examples(rows, columns, cfg, train_path, names)
    evals = {}
    for name, path in eval_paths.items():
        _say_reading(path)
        columns, rows = read_rows(path, fmt=fmt)
        lists = None if cfg.multi_label else train.labels.ndim == 2
        evals[name], _ = rows_to_examples(rows, columns, cfg, path, names, lists=lists)
    return train, evals, names


def _datasets_bars(on: bool) -> None:
    """datasets' progress bars ("Generating train split", its downloads) by the rule of the trainer's own step bar:
    on a terminal, from the main process. They were drawn on any stderr, and a job's log (Vertex takes the trainer's
    stderr) or `ftcli local 2>run.log` got their every redraw. datasets.utils.logging.enable_progress_bar and
    disable_progress_bar switch them (Hugging Face's datasets docs, "Utilities", read 2026-11-29); a
    HF_DATASETS_DISABLE_PROGRESS_BARS the user set decides instead: "Environment variable
    `HF_DATASETS_DISABLE_PROGRESS_BARS` has the priority", and the other call only warns (datasets.utils.tqdm,
    datasets 5.2.0, read 2026-11-29)."""
    from datasets import config
    from datasets.utils import logging as datasets_logging

    if config.HF_DATASETS_DISABLE_PROGRESS_BARS is None:
        (datasets_logging.enable_progress_bar if on else datasets_logging.disable_progress_bar)()


def _load_hub(cfg: TrainConfig, task: Task, bars: bool = False) -> tuple[Examples, dict[str, Examples], list[str]]:
    try:
        from datasets import load_dataset  # imported here: only Hub tasks need it
    except ImportError:  # pragma: no cover - datasets is a trainer dependency
        raise DataError("the `datasets` package is missing", hint="pip install datasets") from None
    _datasets_bars(bars)
    config_name = cfg.dataset_config or task.hf_config
    splits = [task.train_split, *task.eval_splits.values()]
    loaded = {}
    for split in splits:
        try:
            loaded[split] = load_dataset(task.hf_dataset, config_name, split=split)
        except Exception as e:  # noqa: BLE001 - network, auth or missing-dataset errors: all one line
            first = one_line(e)
            raise DataError(
                f"could not load the {task.name} dataset ({task.hf_dataset}"
                f"{'/' + config_name if config_name else ''}, split {split}) from the Hugging Face Hub: "
                f"{first[:200]}. Offline? Pass the data as files (--train-file PATH [--eval-file PATH]), "
                f"or run without --task for the bundled sample"
            ) from None

    def to_examples(ds: Any, shown: str) -> tuple[Examples, list[str]]:  # ds: a datasets.Dataset
        rows = ds.to_list()
        return rows_to_examples(rows, list(ds.column_names), cfg, shown, list(task.labels))

    train, names = to_examples(loaded[task.train_split], f"{task.hf_dataset}:{task.train_split}")
    evals = {name: to_examples(loaded[split], f"{task.hf_dataset}:{split}")[0]
             for name, split in task.eval_splits.items()}
    return train, evals, names


def _eval_share(n: int, cfg: TrainConfig) -> int:
    """How many of `n` training rows are held out for eval when there is no eval set (--eval-fraction)."""
    return max(1, round(n * cfg.eval_fraction))


def _kept_train_rows(n: int, cfg: TrainConfig) -> int:
    """How many of `n` training rows are trained on: --max-train-samples, or --fraction-of-train-data (not both)."""
    return kept_train_rows(n, cfg.max_train_samples, cfg.fraction_of_train_data)


def _held_out_per_label(counts: np.ndarray, n_eval: int, rng: np.random.Generator) -> np.ndarray:
    """How many of each label's rows are held out: `n_eval` shared in proportion to the labels' rows by largest
    remainder (ties in a seeded order), every label keeping at least one training row (a one-row label none held out)
    while the total allows it. Each label's count is within one row of its exact share unless that cap binds. (A
    subset's rows are those left out of `n - k` held out this way: _subset_idx.)"""
    n = int(counts.sum())
    keep_one = np.maximum(counts - 1, 0)
    take = np.minimum(n_eval * counts // n, keep_one)
    order = np.lexsort((rng.random(len(counts)), -(n_eval * counts % n)))  # largest remainder first
    left = n_eval - int(take.sum())
    for cap in (keep_one, counts):  # the second only when held-out rows outnumber what the labels can spare
        while left and (take < cap).any():
            for k in order:
                if left and take[k] < cap[k]:
                    take[k] += 1
                    left -= 1
    return take


def _by_label(ex: Examples, cfg: TrainConfig) -> bool:
    """Whether `ex`'s rows are drawn label by label (single-label classes). Multi-label rows have no one label to split
    by (a row of several labels would count in each), and --regression targets no labels at all: theirs stay the plain
    seeded permutation earlier trainers drew, so a run they started resumes on the same rows."""
    return not cfg.regression and ex.labels.ndim == 1


def _first_of_each_label(labels: np.ndarray, counts: np.ndarray, take: np.ndarray) -> np.ndarray:
    """Whether each row is among the first `take[label]` rows of its label, in the rows' order (`counts`: each
    label's rows): its rank among its label's rows, in one pass."""
    by_label = np.argsort(labels, kind="stable")
    rank = np.empty(len(labels), dtype=np.int64)
    rank[by_label] = np.arange(len(labels)) - np.repeat(np.cumsum(counts) - counts, counts)
    return rank < take[labels]


def _hold_out(train: Examples, cfg: TrainConfig) -> tuple[Examples, dict[str, Examples]]:
    """No eval set: a seeded share of the training data is held out (never trained on), each part in the data's order.

    Single-label classification is split by label (stratified, as scikit-learn's train_test_split(stratify=y)): each
    label's share of the held-out rows is its share of the data, so a 5 % label is scored on its 5 % whatever the
    seed, rather than on 0 to 3 times that. Multi-label rows (no one label to split by) and --regression targets are
    held out by a plain seeded permutation."""
    n = len(train)
    n_eval = _eval_share(n, cfg)
    if n - n_eval < 1:
        raise DataError(f"only {n} training example(s): too few to hold out an eval set",
                        hint="pass --eval-file with examples to score, or add training examples")
    rng = np.random.default_rng(cfg.seed + 1)
    perm = rng.permutation(n)
    if not _by_label(train, cfg):
        held = perm[:n_eval]
    else:
        labels = train.labels[perm]
        counts = np.bincount(labels)
        held = perm[_first_of_each_label(labels, counts, _held_out_per_label(counts, n_eval, rng))]
    mask = np.zeros(n, dtype=bool)
    mask[held] = True
    return train.subset(np.flatnonzero(~mask)), {"eval": train.subset(np.flatnonzero(mask))}


def _subset_idx(ex: Examples, k: int, cfg: TrainConfig) -> np.ndarray:
    """A seeded `k` of `ex`'s rows (k < len(ex)), in the data's order: --max-train-samples, --fraction-of-train-data,
    --max-eval-samples. Single-label classes are drawn label by label, as _hold_out holds rows out and with its
    allocation applied to the rows left out: each label's share of the subset is its share of the rows (within one
    row, by largest remainder), and every label keeps at least one row while `k` is at least the number of labels. A
    random draw of 200 of 4,000 rows had none of a 0.5 % label a third of the time, and a quick run's eval scores
    swung with the seed. Multi-label and regression rows: the plain seeded permutation (_by_label says why)."""
    n = len(ex)
    rng = np.random.default_rng(cfg.seed)
    perm = rng.permutation(n)
    if not _by_label(ex, cfg):
        return np.sort(perm[:k])
    labels = ex.labels[perm]
    counts = np.bincount(labels)
    keep = counts - _held_out_per_label(counts, n - k, rng)
    return np.sort(perm[_first_of_each_label(labels, counts, keep)])


def load_task_data(cfg: TrainConfig, *, bars: bool = False) -> TaskData:
    """The task's data as the run trains on it. `bars`: whether a Hub dataset's loading may draw progress bars (on a
    terminal, from the main process)."""
    task = TASKS[cfg.task]
    fmt = "jsonl" if task.name == "jsonl" else ("csv" if task.name == "csv" else None)
    if cfg.train_file:
        evals_paths = {"eval": cfg.eval_file} if cfg.eval_file else {}
        train, evals, names = _load_files(cfg, task, cfg.train_file, evals_paths, fmt)
    elif task.name == BUNDLED_SAMPLE:
        if not bundled_sample_available():
            raise DataError("the bundled sample is not in this install (it is left out of the package "
                            "uploaded to Vertex)", hint="pass --task with a Hub dataset, or --train-file")
        train, evals, names = _load_files(
            cfg, task, str(bundled_sample_file("sst2_train.csv.gz")),
            {"validation": str(bundled_sample_file("sst2_validation.csv.gz"))}, "csv")
    else:
        train, evals, names = _load_hub(cfg, task, bars)
    hub_rows = None if cfg.train_file or task.name == BUNDLED_SAMPLE else rows_digest({"train": train, **evals})

    if not evals:
        train, evals = _hold_out(train, cfg)

    # on the data as given, before --max-*-samples: a smoke run says what the job would
    if cfg.eval_file:
        _warn_eval_in_train(train, evals)
    if cfg.regression:
        _warn_constant_eval_targets(evals)
    else:
        _warn_thin_labels(train, evals, names)
    # (after the hold-out: the subset is of the rows left to train on, so none of it is ever an eval row)
    rows_before_subset = len(train)
    if (k := _kept_train_rows(len(train), cfg)) < len(train):
        whole, train = train, train.subset(_subset_idx(train, k, cfg))
        given = (f"--max-train-samples {cfg.max_train_samples}" if cfg.max_train_samples is not None else
                 f"--fraction-of-train-data {cfg.fraction_of_train_data:g}")
        _warn_labels_left_out(whole, train, names, cfg, "trains on", given)
    if cfg.max_eval_samples is not None:
        k = cfg.max_eval_samples
        whole_evals = evals
        evals = {name: ex.subset(_subset_idx(ex, k, cfg)) if k < len(ex) else ex
                 for name, ex in evals.items()}
        for name, ex in evals.items():
            _warn_labels_left_out(whole_evals[name], ex, names, cfg, f"scores its {name} set on",
                                  f"--max-eval-samples {k}")
    multi_label = cfg.multi_label or train.labels.ndim == 2  # --label-columns, or JSON lists of labels
    if cfg.regression:
        _check_targets_vary(train.labels, "the training data", cfg)
    elif not multi_label and len(names) < 2:
        raise one_label_error("the training data", names[0], cfg)
    return TaskData(train=train, evals=evals, label_names=names, multi_label=multi_label, regression=cfg.regression,
                    rows_before_subset=rows_before_subset, hub_rows=hub_rows)


def one_label_error(where: str, name: str, cfg: TrainConfig) -> DataError:
    """Training data whose labels are all `name`: the trainer's own check, and the launcher's (check_files)."""
    return DataError(f"{where} has only one label ({name!r}); a classifier needs at least two",
                     hint=f"add examples of the other labels, or pass --label-column with the column that holds the "
                          f"labels (read from {cfg.label_column!r})")


MIN_TRAIN_EXAMPLES = 3  # fewer examples of a label than this: said before training, not found out from the scores
_NAMED = 5  # labels named in such a warning; the rest are counted


def _looks_continuous(names: list[str]) -> bool:
    """Whether class names read off the data are a measurement's values rather than classes: more than 10 numbers,
    some not whole (ratings 1..10 are classes as well as numbers; 0.002, 0.014, ... are not)."""
    keys = [label_key(n) for n in names]
    return (len(names) > 10 and all(kind == "number" for kind, _ in keys)
            and any(not key.lstrip("+-").isdigit() for _, key in keys))


def _warn_labels_left_out(whole: Examples, subset: Examples, names: list[str], cfg: TrainConfig, does: str,
                          flag: str) -> None:
    """A single-label subset smaller than its labels (_subset_idx gives each label a row while it has room) leaves
    some out: say which, after _warn_thin_labels, which judged the data as given."""
    if not _by_label(whole, cfg):
        return
    had, kept = set(whole.labels.tolist()), set(subset.labels.tolist())
    if lost := sorted(had - kept):
        shown = ", ".join(repr(names[i]) for i in lost[:_NAMED]) + (
            f" and {len(lost) - _NAMED} more" if len(lost) > _NAMED else "")
        log.warning("%s keeps %d rows, fewer than the %d labels: the run %s %d of them, without %s; give at least "
                    "%d", flag, len(subset), len(had), does, len(kept), shown, len(had))


def _warn_thin_labels(train_ex: Examples, evals: dict[str, Examples], names: list[str]) -> None:
    """Say which labels have (almost) nothing to learn from, or nothing to be scored on in the first eval set: a
    label with one row trained silently, and the split could leave it out of the held-out rows altogether."""
    k = len(names)

    def counts(ex: Examples) -> np.ndarray:  # multi-label: a 0/1 column per label; else one label id per row
        return ex.labels.sum(axis=0) if ex.labels.ndim == 2 else np.bincount(ex.labels, minlength=k)

    def named(idx: np.ndarray, what: Callable[[int], str]) -> str:
        shown = ", ".join(f"{names[i]!r} ({what(i)})" for i in idx[:_NAMED])
        return shown + (f" and {len(idx) - _NAMED} more" if len(idx) > _NAMED else "")

    if train_ex.labels.ndim == 1 and _looks_continuous(names):
        # a score column without --regression: hundreds of one-row classes, and only "too few to learn" said
        log.warning("the %d labels are numbers that are not all whole (%s, ...): each value is learned as a class of "
                    "its own; to learn a number, pass --regression", k, ", ".join(names[:3]))
    train = counts(train_ex)
    eval_name, first = next(iter(evals.items()))
    scored = counts(first)
    thin = np.flatnonzero(train < MIN_TRAIN_EXAMPLES)
    if len(thin):
        log.warning("%d of %d labels have fewer than %d training examples, too few to learn: %s; add examples, "
                    "or merge or drop those labels", len(thin), k, MIN_TRAIN_EXAMPLES,
                    named(thin, lambda i: f"{int(train[i])} train, {int(scored[i])} {eval_name}"))
    unscored = np.flatnonzero((scored == 0) & (train >= MIN_TRAIN_EXAMPLES))
    if len(unscored):
        log.warning("%d of %d labels have no example in the %s set, so it cannot score them: %s; give --eval-file "
                    "with examples of each, or a larger --eval-fraction", len(unscored), k, eval_name,
                    named(unscored, lambda i: f"{int(train[i])} train"))


# Above this share of an --eval-file's examples also in the training data, its scores are mostly on trained text. (A
# few short texts repeat in real splits: 0.8 % of GoEmotions' dev comments are in its train split, none of SST-2's.)
EVAL_IN_TRAIN_WARN = 0.10


def _warn_eval_in_train(train: Examples, evals: dict[str, Examples]) -> None:
    """Say when much of an --eval-file is training data (the training file given again, or overlapping splits): the
    run scores what it trained on, and the scores look better than the model is."""
    for name, ex in evals.items():
        # a set of the eval examples, not of the training data's (often far more rows): what of it is in the training
        # data is found in one pass over that
        wanted = set(zip(ex.texts, ex.pairs or ex.texts, strict=True))
        found = {x for x in zip(train.texts, train.pairs or train.texts, strict=True) if x in wanted}
        both = sum(x in found for x in zip(ex.texts, ex.pairs or ex.texts, strict=True))
        if len(ex) and both / len(ex) > EVAL_IN_TRAIN_WARN:
            log.warning("%d of %d %s examples (%.0f%%) are also in the training data: their scores are on text it "
                        "trained on, and overstate the model; give an --eval-file of other examples, or none (a share "
                        "of the training data is then held out)", both, len(ex), name, 100 * both / len(ex))


def _warn_constant_eval_targets(evals: dict[str, Examples]) -> None:
    """An eval set whose targets are all one value: Pearson and Spearman are undefined there (metrics.pearson reads
    NaN for it, as for a model that predicts one value), so the run's scores would say nothing. Said before training;
    the MSE still scores it."""
    for name, ex in evals.items():
        if (value := _the_one_target(ex.labels)) is not None:
            log.warning("every target in the %s set is %g: Pearson and Spearman cannot score it (they are NaN whatever "
                        "the model predicts; the MSE still counts); give --eval-file with targets that vary, or a "
                        "larger --eval-fraction", name, value)


def _the_one_target(targets: np.ndarray) -> float | None:
    """The value every regression target has, or None when they vary (or there are none)."""
    return float(targets[0]) if len(targets) and float(targets.min()) == float(targets.max()) else None


def _check_targets_vary(targets: np.ndarray, shown: str, cfg: TrainConfig) -> None:
    if (value := _the_one_target(targets)) is not None:
        raise DataError(f"{shown}: every target is {value:g}; a regression needs targets that vary",
                        hint=f"add examples with other targets{_regression_fix(cfg)}")


# ----------------------------------------------------------------------------------------------
# Tokenization and batching


@dataclass
class Encoded:
    """Token ids of every example, stored flat (one int32 array + offsets): no per-row Python objects."""

    ids: np.ndarray  # int32, all examples concatenated
    offsets: np.ndarray  # int64 [N + 1]
    type_ids: np.ndarray | None  # int8, same layout as ids; only for sentence pairs
    labels: np.ndarray

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1


def encode(tokenizer: PreTrainedTokenizerBase, examples: Examples, max_length: int, chunk: int = 4096) -> Encoded:
    """Tokenize once, in large batches with the fast (Rust) tokenizer; no padding here."""
    ids_parts: list[np.ndarray] = []
    type_parts: list[np.ndarray] = []
    lengths: list[int] = []
    # Token types for sentence pairs where the model's tokenizer gives them by default (its model_input_names), as
    # pipeline() and ftcli predict will: forced on, GPT-2 (which adds its embedding of token 1 to the second text) and
    # ALBERT (whose transformers 5 tokenizer leaves them out) trained on inputs their exported pipeline never sends.
    types = examples.pairs is not None and "token_type_ids" in getattr(tokenizer, "model_input_names", ())
    for start in range(0, len(examples), chunk):
        texts = examples.texts[start:start + chunk]
        second = examples.pairs[start:start + chunk] if examples.pairs is not None else None
        out = tokenizer(texts, second, truncation=True, max_length=max_length, padding=False,
                        return_attention_mask=False, return_token_type_ids=types)
        for row in out["input_ids"]:
            ids_parts.append(np.asarray(row, dtype=np.int32))
            lengths.append(len(row))
        if types:
            type_parts += [np.asarray(row, dtype=np.int8) for row in out["token_type_ids"]]
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ids = np.concatenate(ids_parts) if ids_parts else np.zeros(0, np.int32)
    type_ids = np.concatenate(type_parts) if types and type_parts else None
    return Encoded(ids=ids, offsets=offsets, type_ids=type_ids, labels=examples.labels)


def plan_batches(lengths: np.ndarray, batch_size: int, seed: int, epoch: int,
                 window: int = 50, shuffle: bool = True) -> list[np.ndarray]:
    """Batches of similar length: shuffle, sort inside windows of `window` batches, shuffle the batches.

    Deterministic in (seed, epoch), so a resumed run sees the same order and can skip what it has done.
    Without `shuffle` (eval): one global sort, longest first, so the first batch shows the peak memory.
    """
    n = len(lengths)
    if not shuffle:
        order = np.argsort(-lengths, kind="stable")
        return [order[i:i + batch_size] for i in range(0, n, batch_size)]
    rng = np.random.default_rng([seed, epoch])
    perm = rng.permutation(n)
    span = batch_size * window
    batches: list[np.ndarray] = []
    for s in range(0, n, span):
        chunk = perm[s:s + span]
        chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def collate(enc: Encoded, idx: np.ndarray, pad_id: int, multiple_of: int = 1) -> dict[str, np.ndarray]:
    """Pad one batch to its own longest row (rounded up to `multiple_of`), never to max_length."""
    lengths = enc.lengths[idx]
    width = int(lengths.max())
    if multiple_of > 1:
        width = -(-width // multiple_of) * multiple_of
    ids = np.full((len(idx), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(idx), width), dtype=np.int64)
    type_ids = enc.type_ids
    types = np.zeros((len(idx), width), dtype=np.int64) if type_ids is not None else None
    for row, (i, n) in enumerate(zip(idx, lengths, strict=True)):
        s = enc.offsets[i]
        ids[row, :n] = enc.ids[s:s + n]
        mask[row, :n] = 1
        if types is not None and type_ids is not None:
            types[row, :n] = type_ids[s:s + n]
    out = {"input_ids": ids, "attention_mask": mask, "labels": enc.labels[idx]}
    if types is not None:
        out["token_type_ids"] = types
    return out


def describe_source(cfg: TrainConfig) -> str:
    task = TASKS[cfg.task]
    if cfg.train_file:
        return cfg.train_file + (f" (eval: {cfg.eval_file})" if cfg.eval_file else "")
    if task.name == BUNDLED_SAMPLE:
        return "bundled SST-2 sample"
    config = cfg.dataset_config or task.hf_config
    return f"{task.hf_dataset}/{config}" if config else str(task.hf_dataset)



# ----------------------------------------------------------------------------------------------
# Checking a job's local files before they are uploaded


# The first bytes of a gs:// data file the launcher reads to check its columns (a file no larger is read whole).
HEAD_BYTES = 1 << 20


def head_columns(head: bytes, path: str, shown: str, fmt: str | None) -> tuple[list[str], bool] | None:
    """The columns `read_rows` finds in a file, from its first bytes only (`head`; the file goes on), and whether it
    is CSV; the problems the job's reader finds there are its DataError lines. None where the head holds no whole
    first record, or the file's shape needs all of it (a JSON array, unnamed CSV columns): the job reads it all."""
    if head.startswith(GZIP_MAGIC):  # (by its bytes, as the job's reader: GZIP_MAGIC)
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(head)) as raw:
                raw.read(1)  # a header that is no gzip's: the job's reader's own error
        except EOFError:
            pass  # the head ends inside the compressed stream, as it should
        except (OSError, zlib.error) as e:
            raise _gzip_error(shown, e) from None
        try:  # (gzip's reader drops what it decompressed when its input stops short; zlib's keeps it)
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head)
        except zlib.error as e:
            raise _gzip_error(shown, e) from None
    if problem := _binary_error(head[:HEAD_PEEK], shown, path, fmt):
        raise problem
    try:
        text = codecs.getincrementaldecoder("utf-8-sig")().decode(head, final=False)
    except UnicodeDecodeError:
        raise _other_format(head, shown, path, fmt) or _utf8_error_in(head.split(b"\n"), shown, cut=True) from None
    text = text[:text.rfind("\n") + 1]  # whole lines only
    if not text:
        return None
    if _is_jsonl(path, fmt):
        # Lines end where the job's reader ends them (open_text: \n, \r\n or \r): str.splitlines also cut at U+2028,
        # U+0085 or a vertical tab, which json.dumps(ensure_ascii=False) leaves raw in a string, and a big gs:// file
        # whose first object held one was refused ("line 1 is not valid JSON (Unterminated string ...)").
        lines = io.StringIO(text, newline="").readlines()
        first = next((i for i, line in enumerate(lines) if line.strip()), None)
        if first is None or lines[first].lstrip().startswith("["):
            return None
        rows = _read_jsonl(io.StringIO("".join(lines[:first + 1])), shown, fmt)
        return list(rows[0].keys()), False
    f = io.StringIO(text)
    _refuse_json_lines_as_csv(f, shown, fmt)
    try:
        sep = _separator(path)
        header = _csv_header(csv.reader(f, strict=True, delimiter=sep), shown, sep)
    except csv.Error:
        return None  # a quoted header that runs past the head (or is broken: the job's reader says where)
    return (header, True) if all(c.strip() for c in header) else None


def check_files(cfg: TrainConfig, files: dict[str, str], heads: dict[str, tuple[str, bytes]] | None = None,
                shown: dict[str, str] | None = None) -> int | None:
    """Read local data files exactly as the job will (columns, label values, encoding, `--label-columns`
    globs, train and eval labels consistent) and raise the job's DataError now: the launcher calls this before
    anything is uploaded. `files` maps "train_file"/"eval_file" to local paths; `heads` maps them to (path, first
    bytes) of files too big to read here (gs://), whose header (columns) only is checked; `shown` names them in
    errors (default: their paths). Returns the number of rows the job trains on (after the held-out share and
    --max-train-samples or --fraction-of-train-data, as load_task_data takes them) when the training file was read
    here, else None."""
    task = TASKS[cfg.task]
    fmt = "jsonl" if task.name == "jsonl" else ("csv" if task.name == "csv" else None)
    names: list[str] | None = None if cfg.multi_label else (list(cfg.label_names or task.labels) or None)
    heads, shown = heads or {}, shown or {}
    read: dict[str, Examples] = {}
    for key in ("train_file", "eval_file"):
        if key in files:
            where = shown.get(key, files[key])
            columns, rows = read_rows(files[key], fmt=fmt, shown=where)
            examples, found = rows_to_examples(rows, columns, cfg, where, names)
            read[key] = examples
            if key == "train_file" and cfg.regression:
                _check_targets_vary(examples.labels, where, cfg)
            elif key == "train_file":
                names = found
                if not cfg.multi_label and len(names) < 2:
                    raise one_label_error(where, names[0], cfg)
        elif key in heads:
            path, head = heads[key]
            where = shown.get(key, path)
            if (found_columns := head_columns(head, path, where, fmt)) is not None:
                columns, csv_file = found_columns
                _check_columns(columns, cfg, where, csv_file)
                if cfg.multi_label:
                    label_cols = _label_columns(columns, cfg, where, csv_file, names)
                    names = names or label_cols
    # The job's warning about labels too thin to learn or score, said here before anything is uploaded (with the
    # job's own split when there is no eval file; an eval file in gs:// is the job's to read).
    if "eval_file" in read and "train_file" in read:
        _warn_eval_in_train(read["train_file"], {"eval": read["eval_file"]})
    if "eval_file" in read and cfg.regression:
        _warn_constant_eval_targets({"eval": read["eval_file"]})
    if "train_file" in read and not cfg.regression and names and ("eval_file" in read or not cfg.eval_file):
        train, evals = (read["train_file"], {"eval": read["eval_file"]}) if "eval_file" in read else \
            _hold_out(read["train_file"], cfg)
        _warn_thin_labels(train, evals, names)
    if "train_file" not in read:
        return None
    n = len(read["train_file"])
    return _kept_train_rows(n if cfg.eval_file else n - _eval_share(n, cfg), cfg)
