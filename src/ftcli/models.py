"""Models as core code: download a job's exported model, find the model `ftcli predict` means, classify texts.

Downloading never deletes or escapes the destination. The model is read into a staging folder first (next to a
new destination, inside an existing one: the same filesystem either way), so nothing half-written is ever at the
destination. A new or empty destination then receives it
whole; a non-empty one only with `force`, and then only the model's own files are put in place: every other file
stays, and the completion marker goes last. Bytes are reported through a `progress(done, total)` callback.
"""

from __future__ import annotations

import io
import os
import re
import shlex
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Literal, cast

from ftcli.errors import FtcliError, UsageError, reason
from ftcli.gcp import Notify
from ftcli.values import Job, JobName
from ftcli_trainer.storage import (
    COMPLETE_MARKER,
    UnsafeObjectName,
    clear_staging_inside,
    is_staging_inside,
    names_on_failure,
    relative_object_path,
    split_gcs,
    staging_for,
)

if TYPE_CHECKING:
    import numpy as np
    from transformers import PreTrainedTokenizerBase

    from ftcli.gcp.storage import StoredObject
    from ftcli_trainer.config import TrainConfig

MODELS_DIR = "ftcli-models"
INSIDE_STAGING = "ftcli-download"  # .ftcli-download.tmp-PID-XXXXXXXX, inside a destination that exists
# predict: texts per forward pass, and per piece of output. One text a pass (a pipeline's default) ran 2,000 short
# sentences in 290 s on 2 cores, and a --file printed nothing until its last line was scored.
PREDICT_BATCH = 32
PREDICT_CHUNK = 512


def model_uri_of(job: Job) -> str:
    if not job.model_dir:
        # (the line alone left the user nowhere: ftcli cannot know where such a job put its model, the user can)
        raise FtcliError(f"{job.display_name} has no base output directory: it was not started by ftcli train",
                         hint="copy the model it wrote to a folder here (gcloud storage cp -r gs://.../model DIR), "
                              "then give ftcli predict, evaluate or report that folder")
    return job.model_dir


def default_destination(name: JobName) -> Path:
    # Named by the numeric job id: the display name is chosen by whoever created the job, and may be a path.
    return Path(MODELS_DIR) / name.id


def _others(dest: Path, staging: Path | None = None) -> list[Path]:
    """What `dest` holds, less our own `staging` folder and another live download's (a dead one's is gone by now:
    clear_staging_inside): a download that had just started into an empty folder made it "not empty" to a second one
    of the same model, while `ls` showed nothing there."""
    return [p for p in dest.iterdir() if p != staging and not is_staging_inside(p, INSIDE_STAGING)]


def check_destination(dest: Path, force: bool) -> None:
    """Refuse, before anything is downloaded, a destination that is a file, or a non-empty folder without force."""
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"{dest} is not a folder", hint="give a folder (new or empty) for the model")
    if dest.is_symlink() and not dest.exists():
        # (found here, not by the rename onto the link after the whole download: "Not a directory")
        raise UsageError(f"{dest} is a link to {os.readlink(dest)}, which does not exist",
                         hint="create the folder it points to, or give another folder for the model")
    if dest.is_dir() and not force and _others(dest):
        raise UsageError(f"{dest} is not empty",
                         hint="give a new or empty folder, or --force to write the model's files into it "
                              "(other files are kept; files with the model's names are replaced)")


def _model_files(uri: str, objects: list[StoredObject]) -> list[tuple[str, PurePosixPath, int]]:
    """(object name, relative path, size) of the model's files; refuse the whole model if one name could
    land outside the destination."""
    _, prefix = split_gcs(uri)
    prefix = prefix + "/"
    files = []
    for name, size, _ in objects:
        try:
            rel = relative_object_path(name, prefix)
        except UnsafeObjectName as e:
            raise FtcliError(f"refusing to download {uri}: {e}",
                             hint="nothing was written; the model folder holds objects ftcli did not write") from None
        if rel is not None:
            files.append((name, rel, size))
    return files


def _conflicts(dest: Path, rels: list[PurePosixPath]) -> list[str]:
    """Where a model file cannot go into an existing folder without deleting or following something."""
    problems = []
    for rel in rels:
        path = dest
        for part in rel.parts[:-1]:
            path = path / part
            if path.is_symlink() or (path.exists() and not path.is_dir()):
                problems.append(f"{path} is {'a link' if path.is_symlink() else 'a file'}; the model has a folder "
                                f"there")
                break
        else:
            target = dest.joinpath(*rel.parts)
            if target.is_dir() and not target.is_symlink():
                problems.append(f"{target} is a folder; the model has a file there")
    return problems


def place(staging: Path, dest: Path, rels: list[PurePosixPath]) -> None:
    """Move the downloaded files from `staging` into `dest`; the completion marker goes last."""
    if not dest.exists():
        staging.rename(dest)  # same filesystem: the whole model appears at once
        return
    problems = _conflicts(dest, rels)
    if problems:
        raise FtcliError(problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""),
                         hint="move it away, or download into a new folder; nothing was changed")
    marker = dest / COMPLETE_MARKER
    if marker.is_file() or marker.is_symlink():
        marker.unlink()  # until the new marker lands, the folder does not claim to hold a complete model
    ordered = sorted(rels, key=lambda r: r == PurePosixPath(COMPLETE_MARKER))
    for rel in ordered:
        target = dest.joinpath(*rel.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging.joinpath(*rel.parts), target)


def _filled_meanwhile(dest: Path, staging: Path) -> bool:
    """Whether `dest` now holds something other than our own `staging` folder (it was checked new or empty)."""
    try:
        return dest.is_symlink() and not dest.exists() or dest.exists() and (
            not dest.is_dir() or bool(_others(dest, staging)))
    except OSError:
        return True


def _no_complete_model(job: Job, uri: str, ref: str) -> FtcliError:
    """Why there is no model to take, by the job's state: still running, ended without one, or finished without
    one (its export failed, or it ran a trainer from before the completion marker)."""
    missing = f"no complete model in {uri} (no {COMPLETE_MARKER} marker)"
    if not job.final:
        return FtcliError(f"{missing}; the job is {job.state}", hint=f"ftcli logs {ref} to see how it is going")
    if job.state == "SUCCEEDED":
        return FtcliError(f"the job SUCCEEDED but exported {missing}",
                          hint=f"its logs say what the export did: ftcli logs {ref}; a model exported by an older "
                               f"trainer has no marker: copy it with `gcloud storage cp -r {uri} DEST`")
    return FtcliError(f"the job ended {job.state} before exporting a model: {missing}",
                      hint=f"its logs say why: ftcli logs {ref}")


class DownloadInterrupted(KeyboardInterrupt):
    """Ctrl-C during a download, with what it left in the destination: `partial` when some of the model's files
    were moved in (without the completion marker), else `said` is all there is to know."""

    def __init__(self, said: str, partial: bool = False):
        super().__init__(said)
        self.said = said
        self.partial = partial


@dataclass
class Downloaded:
    path: Path
    job: Job
    files: int
    bytes: int
    already: bool = False  # the folder held this very model: nothing was downloaded (bytes 0), or another download
    # of it put it there while this one downloaded (bytes: what this one read, then dropped)


def _crc32c(path: Path) -> str:
    import base64

    import google_crc32c

    checksum = google_crc32c.Checksum()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            checksum.update(chunk)
    return base64.b64encode(checksum.digest()).decode()


def _holds(dest: Path, files: list[tuple[str, PurePosixPath, int]], sums: dict[str, str | None],
           others: bool = False) -> bool:
    """Whether `dest` already holds exactly this model: the same files, sizes and CRC32C checksums (the same command
    run twice was refused as "not empty"). Anything more or less, or another model, is not it; with `others` (--force,
    which keeps the folder's other files) files of other names may be there too: the same `--force` command run twice
    downloaded the whole model again."""
    if not dest.is_dir():  # (a link to a folder is that folder, as the download wrote into it)
        return False
    try:
        here = {p.relative_to(dest).as_posix(): p for p in dest.rglob("*") if p.is_file() or p.is_symlink()}
        wanted = {rel.as_posix() for _, rel, _ in files}
        if not (wanted <= set(here) if others else set(here) == wanted):
            return False
        if any(here[rel.as_posix()].is_symlink() or here[rel.as_posix()].stat().st_size != size
               for _, rel, size in files):
            return False
        return all(sums.get(n) is not None and sums[n] == _crc32c(here[rel.as_posix()]) for n, rel, _ in files)
    except OSError:
        return False


def download_model(name: JobName, dest: Path | None, *, force: bool = False, shown: str | None = None,
                   notify: Notify | None = None, progress: Callable[[int, int | None], None] | None = None
                   ) -> Downloaded:
    """Copy a job's exported model to `dest` (default ./ftcli-models/JOB_ID). `shown` is how the user referred to
    the job (for the hint)."""
    from ftcli.gcp.storage import get_storage
    from ftcli.gcp.vertex import get_vertex

    job = get_vertex(name.project, name.region, notify).get(name)
    uri = model_uri_of(job)
    storage = get_storage(name.project, notify)
    objects = storage.list_objects(uri)
    files = _model_files(uri, objects)
    if not any(rel == PurePosixPath(COMPLETE_MARKER) for _, rel, _ in files):
        raise _no_complete_model(job, uri, shown or name.id)
    if dest is None:
        dest = default_destination(name)
        # From a folder that takes no new file (a read-only checkout, / in a container) the default destination was
        # 'cannot use ./ftcli-models: Permission denied; check the permissions ...', with no word of DIR.
        from ftcli_trainer.config import cannot_write_in

        if (problem := cannot_write_in(Path(os.path.abspath(dest)))) is not None:
            raise UsageError(f"the default folder {dest}: {problem}",
                             hint=f"give a folder you can write in: ftcli download {shown or name.id} DIR")
    where = Path(os.path.abspath(dest))
    clear_staging_inside(where, INSIDE_STAGING)  # a folder that exists is staged in (staging_for)
    sums = {o.name: o.crc32c for o in objects}
    if _holds(dest, files, sums, others=force):
        return Downloaded(dest, job, len(files), 0, already=True)
    check_destination(dest, force)
    staging = staging_for(where, INSIDE_STAGING)
    existed, placing = where.is_dir(), False
    try:
        bucket, _ = split_gcs(uri)
        # A full disk names no file, and "No space left on device" alone said not which disk: the destination's.
        with names_on_failure(dest):
            sent = storage.download_objects(bucket, [(n, staging.joinpath(*rel.parts)) for n, rel, _ in files],
                                            total=sum(size for _, _, size in files), progress=progress)
        if not force and _filled_meanwhile(where, staging):
            # checked empty before the download, filled since (another download into the same folder, or the user);
            # the same model put there by another download of this job is what was asked for, not a failure
            shutil.rmtree(staging, ignore_errors=True)
            if _holds(dest, files, sums):
                return Downloaded(dest, job, len(files), sent, already=True)
            raise FtcliError(f"{dest} was filled while the model downloaded (another download into it?)",
                             hint="nothing was changed there; download into a new folder, or --force to write the "
                                  "model's files into it")
        placing = True
        place(staging, where, [rel for _, rel, _ in files])
    except KeyboardInterrupt:
        # The staging folder goes (below); what the destination holds depends on how far the move in got.
        if (where / COMPLETE_MARKER).is_file() and placing:
            raise DownloadInterrupted(f"the model had arrived: {dest} holds it, complete") from None
        if placing and existed:
            raise DownloadInterrupted(f"{dest} holds part of the model's files, without {COMPLETE_MARKER} (not a "
                                      "complete model); its other files are as they were", partial=True) from None
        raise DownloadInterrupted(f"nothing was written to {dest}" + (" (its files are as they were)" if existed
                                  else "") + "; what had been downloaded was removed") from None
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return Downloaded(dest, job, len(files), sent)


# --- predict ---------------------------------------------------------------------------------------------------

def cache_dir() -> Path:
    """ftcli's cache folder: `<user cache dir>/ftcli`, or FTCLI_CACHE_DIR (a container whose user has no writable
    home, a CI runner's cache volume), as FTCLI_STATE_DIR moves the history."""
    from ftcli.settings import env_path

    if path := env_path("FTCLI_CACHE_DIR"):
        return path
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("ftcli"))


def cached_model(name: JobName) -> Path:
    """Where `ftcli predict JOB` keeps a job's model: the user cache, by project, region and job id (a job id is
    Vertex's for one project and region: keyed by the id alone, another project's job of that id, or a restarted
    emulator's, had its model taken for this one's)."""
    return cache_dir() / "models" / name.project / name.region / name.id


def model_folder(model: str, project: str | None, region: str | None, *, notify: Notify | None = None,
                 progress: Callable[[int, int | None], None] | None = None, trial: str | None = None,
                 command: str = "ftcli predict") -> Path:
    """A model folder, or a job reference (a tuning job: its best trial, or `trial`) whose model is downloaded to
    the user cache once. `command` (predict or evaluate) is what a hint tells the user to run on a folder instead."""
    from ftcli import jobs
    from ftcli.history import folder_over_job
    from ftcli_trainer.model import cache_snapshot

    path = Path(model)
    if path.is_dir():
        if trial is not None:  # (it was dropped without a word: the folder's model was used, not trial N's)
            raise UsageError(f"--trial is for tuning jobs; {model} is a folder", hint=jobs.NO_TRIAL)
        if notify is not None and (shadowed := folder_over_job(model)):
            notify(shadowed)
    else:
        name = jobs.resolve_job(model, project, region, trial=trial, notify=notify, folder_too=True)
        path = cached_model(name)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            # A home that is missing or read-only (a container's user): it said "cannot use /nonexistent: No such
            # file or directory", naming neither the cache nor how to move it. The download carries --trial: without
            # it, a tuning job's download is its best trial's model, not the one asked for. Quoted for the shell: a
            # console URL's '?' is a glob that zsh refuses unmatched.
            chosen = "" if trial is None else f" --trial {shlex.quote(trial)}"
            raise FtcliError(f"cannot keep the model of job {model} in ftcli's model cache {path.parent}: "
                             f"{reason(e)}",
                             hint=f"set FTCLI_CACHE_DIR to a writable folder, or run `ftcli download "
                                  f"{shlex.quote(model)} DIR{chosen}` and `{command} DIR ...`") from None
        if not (path / COMPLETE_MARKER).exists():
            # ftcli's own cache folder: a copy left without its marker is completed in place
            path = download_model(name, path, force=True, shown=model, notify=notify, progress=progress).path
    if not (path / "config.json").exists():
        # (any other folder had no hint: what a model folder is, and where ftcli puts one)
        hint = "give a folder with the model's config.json (a run's model/ folder, or where ftcli download put it), " \
               "or a job"
        if (path / "model" / "config.json").exists():  # `ftcli local` prints the run folder last
            hint = f"it is a run folder; its model is {path / 'model'}"
        elif snapshot := cache_snapshot(str(path)):
            hint = f"it is a Hugging Face cache folder; its model is {path / snapshot}"
        elif (path / "checkpoints").is_dir() or (path / "logs").is_dir():
            hint = f"it is a run folder with no exported model yet ({path / 'model'}): the run has not finished"
        raise UsageError(f"{path} is not a model folder (no config.json)", hint=hint)
    return path


def pipeline_recipe(path: Path | str) -> str:
    """How to load the model in `path` with transformers alone, the way `predict` reads it: cut where the run cut
    (its tokenizer's model_max_length is the run's --max-length), a regression's raw score, a pair as a dict."""
    import json

    try:
        problem = json.loads((Path(path) / "config.json").read_text(encoding="utf-8")).get("problem_type")
    except (OSError, ValueError):
        problem = None
    raw = ", function_to_apply='none'" if problem == "regression" else ""
    recipe = f"transformers.pipeline('text-classification', model='{path}', truncation=True{raw})"
    if trained_on_pairs(Path(path)):
        recipe += "; a pair: clf({'text': FIRST, 'text_pair': SECOND})"
    return recipe


def run_config(path: Path) -> dict | None:
    """The options the model in `path` was trained with (the ftcli_run.json the trainer exports beside it), or None
    when the folder has none (a model from elsewhere, or an older trainer)."""
    import json

    try:
        run = json.loads((path / "ftcli_run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return run if isinstance(run, dict) else None


def trained_on_pairs(path: Path) -> tuple[str, str] | Literal[False] | None:
    """(first column, second column) when the model in `path` was trained on sentence pairs (MNLI, MRPC, STS-B,
    --text-pair-column ...), False when on single texts, from the ftcli_run.json the trainer exports beside it;
    None when the folder has none (not known)."""
    return _pairs_of(run_config(path))


def _pairs_of(run: dict | None) -> tuple[str, str] | Literal[False] | None:
    if run is None:
        return None
    second = run.get("text_pair_column")
    return (_text_column(run), str(second)) if second else False


def _text_column(run: dict | None) -> str:
    return str((run or {}).get("text_column") or "text")


def _max_length(run: dict | None) -> int | None:
    """The --max-length the model was trained and evaluated at: its inputs are cut there, not at the tokenizer's
    own limit (512 for BERT), or a prediction differs from the run's own evaluation of the same text."""
    value = (run or {}).get("max_length")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def saved_threshold(config: dict | None, run: dict | None) -> float | None:
    """The threshold a multi-label model's F1s are at, as its folder says it: config.json's `ftcli_threshold` (the
    trainer sets it on the model's config), else ftcli_run.json's `threshold` (the run's --threshold); None when
    neither holds a number. The one reading of it: `ftcli predict` and `ftcli evaluate` apply it (when no
    --threshold is given) and `ftcli report` shows it beside the F1s, so the three never disagree on a model."""
    for value in ((config or {}).get("ftcli_threshold"), (run or {}).get("threshold")):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


@dataclass
class Text:
    """One input to classify and where it came from (for an error that names it): an argument, a line of a text
    file, or a row of a CSV / JSON Lines file (`record`: the model's own columns are taken from it)."""

    text: str
    where: str
    record: dict | None = None


def is_table(file: Path) -> bool:
    """Whether --file is read as a CSV or JSON Lines file's rows (by its extension), not line by line."""
    return file.name.lower().removesuffix(".gz").endswith((".csv", ".jsonl", ".json", ".ndjson"))


def is_tsv(file: Path) -> bool:
    """A .tsv --file: read by its columns when its first line names them (tsv_inputs), else line by line."""
    return file.name.lower().removesuffix(".gz").endswith(".tsv")


def read_inputs(file: Path) -> tuple[list[Text], str | None]:
    """The texts of --file, and the file's whole text where it is read line by line (`tsv_inputs` reads a .tsv's rows
    from that text, not from the file a second time): a CSV or JSON Lines file's rows (by its extension, by the
    trainer's own readers; the model's text columns are taken from them), else every non-empty line (a pair model's:
    TEXT<TAB>PAIR). Either may be .gz."""
    from ftcli_trainer import data
    from ftcli_trainer.errors import DataError

    shown = f"--file {file}"
    try:
        if is_table(file):
            _, rows = data.read_rows(str(file), shown=shown)
            return _row_texts(file, rows), None
        with data.open_text(file, shown, str(file)) as f:
            text = f.read()
    except DataError as e:
        raise UsageError(str(e), hint=e.hint) from None
    # Lines end at \n, \r\n or \r only: str.splitlines() also cut a text at U+2028, U+0085 or a form feed (in
    # scraped or PDF-extracted text), giving more predictions than lines, misnumbered.
    lines = re.split(r"\r\n|\r|\n", text)
    return [Text(line, f"{file} line {n}") for n, line in enumerate(lines, 1) if line.strip()], text


def _row_texts(file: Path, rows: list[dict]) -> list[Text]:
    from ftcli_trainer import data

    return [Text("", f"{file} {data.row_position(rows, i)}", dict(row)) for i, row in enumerate(rows)]


def tsv_inputs(path: Path, file: Path, lines: list[Text], text: str, text_column: str | None = None,
               text_pair_column: str | None = None) -> list[Text]:
    """A .tsv --file's texts for the model in `path`, from its `lines` and its whole `text` (read_inputs'): its rows,
    by the trainer's reader, when its first line names the text's column (--text-column's, or the one the model was
    trained on: GLUE's dev.tsv starts "sentence<TAB>label"), else its lines (a pair model's TEXT<TAB>PAIR lines have
    no such line). Read line by line, a header was classified as a text, and for a single-text model each line's
    label with its text. So a single-text model's TAB-separated lines without such a first line are refused, as
    --text-column or --text-pair-column naming a column that line does not have."""
    from ftcli_trainer import data
    from ftcli_trainer.errors import DataError

    run = run_config(path)
    if not lines:
        return lines
    header = lines[0].text.split("\t")
    wanted = text_column or _text_column(run)
    if wanted in header:
        try:  # (newline="": the text's line breaks as the file holds them, as read_rows reads a file)
            _, rows = data.rows_of(io.StringIO(text, newline=""), str(file), shown=f"--file {file}")
        except DataError as e:
            raise UsageError(str(e), hint=e.hint) from None
        return _row_texts(file, rows)
    if text_column or text_pair_column:
        flag, name = ("--text-column", text_column) if text_column else ("--text-pair-column", text_pair_column)
        raise UsageError(f"{file}'s first line does not name the column {name!r} ({flag}): a .tsv is read by its "
                         "columns when its first line names them",
                         hint="start the file with a line of its columns' names, TAB-separated")
    if _pairs_of(run) is False and (tabbed := next((x for x in lines if "\t" in x.text), None)):
        fields = len(tabbed.text.split("\t"))
        raise UsageError(f"{tabbed.where} has {fields} TAB-separated fields, and {path} classifies one text (it was "
                         f"trained on single texts): a .tsv is read by its columns when its first line names the "
                         f"text's ({wanted!r})",
                         hint="name the text's column with --text-column NAME, or start the file with a line of its "
                              "columns' names, TAB-separated")
    return lines


def _column(item: Text, column: str, flag: str, given: bool) -> str:
    """`item`'s text in `column`: the model's own column, or the one `flag` (--text-column, --text-pair-column)
    named (`given`)."""
    value = item.record.get(column) if item.record is not None else None
    if value is None:
        have = ", ".join(map(str, item.record)) if item.record else "none"
        why = flag if given else "the column the model was trained on"
        raise UsageError(f"{item.where} has no {column!r} ({why}; it has: {have})",
                         hint=f"give {flag} one of its columns" if given else
                         f"name the file's column: {flag} NAME")
    if isinstance(value, (list, dict)):  # the trainer refuses these too: str() is Python's repr, not the text
        kind = "list" if isinstance(value, list) else "object"
        raise UsageError(f"{item.where}: {column!r} is a JSON {kind}, not a string",
                         hint="write each text as one string")
    return str(value)


def pair_up(path: Path, texts: Sequence[Text | str], pairs: list[str] | None, text_column: str | None = None,
            text_pair_column: str | None = None) -> tuple[list[str], list[str | None]]:
    """(first texts, second texts) for the model in `path`: `pairs` (one per text), a CSV / JSON Lines row's
    columns (the model's own, or `text_column` / `text_pair_column` where given), or for a pair model each line
    split at its TAB. A pair model without pairs, pairs for a single-text model, or an empty text is a UsageError
    naming the input: a model fed the wrong input answers anyway, wrongly."""
    return _pair_up(path, run_config(path), texts, pairs, text_column, text_pair_column)


def _pair_up(path: Path, run: dict | None, texts: Sequence[Text | str], pairs: list[str] | None,
             text_column: str | None = None, text_pair_column: str | None = None
             ) -> tuple[list[str], list[str | None]]:
    items = [t if isinstance(t, Text) else Text(t, f"text {i}") for i, t in enumerate(texts, 1)]
    columns = _pairs_of(run)
    if pairs is not None:
        if columns is False:
            raise UsageError(f"{path} was trained on single texts, not pairs", hint="drop --pair")
        if len(pairs) != len(items):
            raise UsageError(f"{len(items)} text(s) but {len(pairs)} --pair value(s): give one --pair per text, in "
                             "order")
    if text_pair_column is not None and columns is False:
        raise UsageError(f"{path} was trained on single texts, not pairs", hint="drop --text-pair-column")
    # A model that does not say (no ftcli_run.json) takes a pair only when --text-pair-column names one.
    pair_column = text_pair_column or (columns[1] if columns else None)
    first_column = text_column or _text_column(run)
    if pair_column is not None and pair_column == first_column and (text_column or text_pair_column):
        # One column given for both texts (--text-pair-column naming the model's own text column, or the reverse):
        # each row would be classified as a text paired with itself.
        given = "--text-pair-column" if text_pair_column else "--text-column"
        raise UsageError(f"{given} {(text_pair_column or text_column)!r} is the column of the other text too: a pair "
                         "needs two columns", hint="name the column that holds each row's other text")
    firsts: list[str] = []
    seconds: list[str | None] = []
    for i, item in enumerate(items):
        if item.record is not None:
            if (pair_column and text_column is None and text_pair_column is None
                    and item.record.get(first_column) is None and item.record.get(pair_column) is None):
                have = ", ".join(map(str, item.record)) or "none"
                raise UsageError(f"{item.where} has neither {first_column!r} nor {pair_column!r} (the columns the "
                                 f"model was trained on; it has: {have})",
                                 hint="name the file's columns: --text-column NAME --text-pair-column NAME")
            first = _column(item, first_column, "--text-column", text_column is not None)
            second = _column(item, pair_column, "--text-pair-column", text_pair_column is not None) \
                if pair_column else None
        elif pairs is not None:
            first, second = item.text, pairs[i]
        elif columns:
            parts = item.text.split("\t")
            if len(parts) != 2:
                what = f"has no {columns[1]}" if len(parts) == 1 else f"has {len(parts)} TAB-separated fields, not 2"
                raise UsageError(f"{path} was trained on sentence pairs ({columns[0]} + {columns[1]}): {item.where} "
                                 f"{what}", hint='--pair "TEXT" once per text, in order, or TAB-separated pairs '
                                                 '(TEXT<TAB>PAIR, one per line in --file)')
            first, second = parts
        else:
            first, second = item.text, None
        if not first.strip() or (second is not None and not second.strip()):
            what = "its pair" if first.strip() else "the text"
            raise UsageError(f"{item.where}: {what} is empty; there is nothing to classify",
                             hint="give a non-empty text (the model was trained on none)")
        firsts.append(first)
        seconds.append(second)
    return firsts, seconds


def predict(path: Path, texts: Sequence[Text | str], threshold: float | None = None,
            pairs: list[str] | None = None) -> list[dict]:
    """Every result of `predict_chunks`, in one list."""
    return [r for chunk in predict_chunks(path, texts, threshold, pairs) for r in chunk]


def predict_chunks(path: Path, texts: Sequence[Text | str], threshold: float | None = None,
                   pairs: list[str] | None = None, chunk: int = PREDICT_CHUNK, text_column: str | None = None,
                   text_pair_column: str | None = None, notify: Notify | None = None) -> Iterator[list[dict]]:
    """Classify `texts` with the model in `path`, `chunk` results at a time, in order (a big --file shows its first
    lines in seconds; bad input raises before the first chunk): {"text", "label", "score"} each, or for a
    multi-label model {"text", "labels": [{"label", "score"}, ...]} with the labels at or above the threshold
    (the model's own unless given), or for a regression model (STS-B) {"text", "score"}: the predicted value. A
    model trained on sentence pairs takes `pairs` (or TAB-separated texts, see pair_up); each result then has
    "text_pair" too. A CSV / JSON Lines row's text is in `text_column` (and `text_pair_column`) where given, else in
    the model's own columns. The model is loaded when this is called, before the first chunk is asked for (ftcli
    predict says which of the two an interruption stopped); `notify` hears of a choice made as it loads (torch's
    threads made to wait asleep on a busy machine)."""
    run = run_config(path)  # read once: the columns and the length the model was trained at
    texts, seconds = _pair_up(path, run, texts, pairs, text_column, text_pair_column)
    chars = sum(map(len, texts)) + sum(len(s) for s in seconds if s is not None)
    return _chunks(_Classifier(path, run, threshold, notify=notify, chars=chars), texts, seconds, chunk)


def _weight_bytes(path: Path) -> int:
    """The bytes of the weight files in a model folder (safetensors, or PyTorch's .bin; both counted where both are
    there), a measure of the work of its forward passes."""
    try:
        return sum(p.stat().st_size for p in path.iterdir() if p.suffix in (".safetensors", ".bin") and p.is_file())
    except OSError:
        return 0


def _chunks(c: _Classifier, texts: list[str], seconds: list[str | None], chunk: int) -> Iterator[list[dict]]:
    from ftcli_trainer import metrics

    for start in range(0, len(texts), chunk):
        part = range(start, min(start + chunk, len(texts)))
        logits = c.logits([texts[i] for i in part], [seconds[i] for i in part])
        # What the pipeline's postprocess gave (transformers 5.24, pipelines/text_classification.py, read
        # 2026-11-29: a regression head's one output as it is, a sigmoid per label, a softmax over the labels), in
        # float64: a multi-label model's threshold applied to the probabilities ftcli evaluate applies it to
        # (metrics.sigmoid)
        if c.multi:
            scores = metrics.sigmoid(logits)
        elif not c.regression:
            scores = metrics.softmax(logits)
        out: list[dict] = []
        for j, i in enumerate(part):
            given = {"text": texts[i]} if seconds[i] is None else {"text": texts[i], "text_pair": seconds[i]}
            if c.regression:  # (a softmax over one output would always read 1.0)
                out.append({**given, "score": round(float(logits[j, 0]), 4)})
            elif c.multi:
                ranked = sorted(range(len(c.names)), key=lambda k: -scores[j, k])  # (ties in id order)
                out.append({**given, "labels": [{"label": c.names[k], "score": round(float(scores[j, k]), 4)}
                                                for k in ranked if scores[j, k] >= c.threshold]})
            else:
                k = int(scores[j].argmax())
                out.append({**given, "label": c.names[k], "score": round(float(scores[j, k]), 4)})
        yield out


class _Classifier:
    """The model in `path`, loaded as a transformers text-classification pipeline loads it and scored as the trainer
    evaluates (logits), checked (a damaged folder, a base model without a trained head, a tokenizer that does not
    match), with what it is: multi-label (its `threshold`: the one given, else the model's own), regression, or
    single-label."""

    def __init__(self, path: Path, run: dict | None, threshold: float | None = None, command: str = "ftcli predict",
                 notify: Notify | None = None, chars: int | None = None):
        """`chars`: how many characters there are to score, where known (a few are scored without looking at what
        else the machine runs, below)."""
        from ftcli.local import require_train_extra
        from ftcli_trainer.config import TrainConfig
        from ftcli_trainer.cpu import wait_passively_if_busy, worth_a_look
        from ftcli_trainer.model import scoring_pad_id, vocabulary_problem

        require_train_extra(command)
        # Torch's threads wait for each other asleep when other work keeps the CPUs busy, as in the trainer (its
        # evaluation and this scoring are the same forward passes): spinning, they took the CPU the thread they waited
        # for needed, and `ftcli evaluate` of the 872 SST-2 dev rows on MiniLM-L6 took 25-28 s of CPU on the busy
        # 2-core VM where the trainer's own evaluation of them took ~7 (bench/README.md, 2026-11-29). Before torch
        # is imported (OpenMP reads the setting once, as it loads); a value the user set is kept. A few texts are
        # scored without the look: it would cost them more than spinning could (cpu.WORTH_A_LOOK).
        if chars is None or worth_a_look(chars, _weight_bytes(path)):
            if (said := wait_passively_if_busy(os.environ)) is not None and notify:
                notify(said.removeprefix("note: "))
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local folder: never wait on the Hub
        from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        try:
            model, info = AutoModelForSequenceClassification.from_pretrained(str(path), output_loading_info=True)
            clf = pipeline("text-classification", model=model, tokenizer=AutoTokenizer.from_pretrained(str(path)),
                           top_k=None)
        except Exception as e:  # noqa: BLE001 - a damaged folder fails in many ways deep inside transformers
            from ftcli_trainer.errors import one_line

            raise FtcliError(f"cannot load the model in {path}: {one_line(e)}",
                             hint="download it again into a new folder (ftcli download JOB DIR), or give another "
                                  "model folder") from None
        if missing := info.get("missing_keys"):
            # A base model (no classification head): transformers makes one up at random, and says so only in a
            # warning the verbosity above hides. Its labels would be noise.
            raise FtcliError(f"{path} holds no trained classifier: {', '.join(sorted(missing)[:3])} would be random",
                             hint="give a fine-tuned model folder: RUN/model from ftcli local, or ftcli download JOB")
        # (a pipeline's tokenizer is typed Optional; this one was given the tokenizer loaded above)
        if problem := vocabulary_problem(cast("PreTrainedTokenizerBase", clf.tokenizer)):
            raise FtcliError(f"{path}: {problem}; its predictions would be noise",
                             hint="save the tokenizer the model was trained with into the folder "
                                  "(tokenizer.save_pretrained)")
        config = clf.model.config
        # The pipeline is still made for what it decides as it loads, as it decides it for those who load the model
        # with pipeline_recipe's line: the device it moves the model to (the first GPU where there is one). The
        # scoring is logits()'s.
        self.model, self.device = clf.model, clf.device
        self.tokenizer = cast("PreTrainedTokenizerBase", clf.tokenizer)
        # A model with no padding id scores one row per forward pass (no padding, nothing to pool wrong)
        self.pad_id = scoring_pad_id(self.model, self.tokenizer)
        id2label = cast(dict[int, str], config.id2label or {})
        self.names = [str(id2label.get(i, f"LABEL_{i}")) for i in range(int(config.num_labels or 0))]
        self.multi = config.problem_type == "multi_label_classification"
        # A model from elsewhere (a plain save_pretrained folder) may have one output and no problem_type:
        # transformers trains that as regression (BertForSequenceClassification.forward, transformers 5.24: `if
        # self.config.problem_type is None: if self.num_labels == 1: self.config.problem_type = "regression"`).
        self.regression = config.problem_type == "regression" or (config.problem_type is None
                                                                  and config.num_labels == 1)
        if threshold is not None and not self.multi:
            kind = "a regression model (its output is the score)" if self.regression else \
                "single-label (the top label is the answer)"
            raise UsageError(f"--threshold applies to multi-label models; {path} is {kind}",
                             hint="leave --threshold out")
        # Without --threshold, the model's own (saved_threshold); one whose folder says none (a model from
        # elsewhere) gets the trainer's --threshold default
        saved = saved_threshold(config.to_dict(), run)
        self.threshold = threshold if threshold is not None else saved if saved is not None else TrainConfig.threshold
        # Cut where the run trained and evaluated; a model from elsewhere at what its tokenizer and positions allow
        # (a tokenizer without a limit says 1e30: a long text then overran the position embeddings).
        tokenizer = clf.tokenizer
        assert tokenizer is not None  # given to pipeline() above
        self.cut_at = _max_length(run) or min(tokenizer.model_max_length,
                                              getattr(config, "max_position_embeddings", None) or 10**9)

    def logits(self, texts: Sequence[str], seconds: Sequence[str | None],
               progress: Callable[[int, int], None] | None = None) -> np.ndarray:
        """The model's outputs (rows x labels, in its id order, float32) for each text (and its pair, where not
        None). `progress(done, len(texts))` is called as they are scored, every few batches.

        Scored as the trainer's evaluation scores its eval set (Trainer.evaluate): tokenized at once, in large
        batches (data.encode: the same truncation at cut_at and token types as the pipeline's, see its comment), in
        batches of similar length, longest first, each padded to its own longest row (data.collate), under
        torch.inference_mode. The pipeline this replaced tokenized, padded and post-processed row by row; on
        MiniLM-L6 it took 7-8 s of CPU for the 872 SST-2 dev rows where this takes 5-6 (bench/README.md,
        2026-11-29), for the same outputs to within 1e-6."""
        import numpy as np
        import torch

        from ftcli_trainer import data

        n = len(texts)
        out = np.zeros((n, len(self.names)), dtype=np.float32)
        # Single texts and pairs each encoded on their own (a file gives one kind; a caller could give both)
        batches = []
        for single in (True, False):
            rows = np.array([i for i in range(n) if (seconds[i] is None) is single], dtype=np.int64)
            if not len(rows):
                continue
            pairs = None if single else [cast(str, seconds[i]) for i in rows]
            enc = data.encode(self.tokenizer, data.Examples([texts[i] for i in rows], pairs, np.zeros(len(rows))),
                              self.cut_at)
            order = np.argsort(-enc.lengths, kind="stable")
            size = PREDICT_BATCH if self.pad_id is not None else 1
            batches += [(rows, enc, order[s:s + size]) for s in range(0, len(order), size)]
        if progress:  # the scoring begins (what came before it: reading the rows, loading the model)
            progress(0, n)
        done = 0
        with torch.inference_mode():
            for b, (rows, enc, idx) in enumerate(batches):
                out[rows[idx]] = self._forward(data.collate(enc, idx, self.pad_id or 0))
                done += len(idx)
                # every few batches, so that `progress` moves: 25,000 IMDB reviews on a CPU said nothing for an hour
                # after "scoring"
                if progress and (b % 4 == 3 or b == len(batches) - 1):
                    progress(done, n)
        return out

    def _forward(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        """One batch's outputs (data.collate's batch; its labels are not the model's to see)."""
        import torch

        given = {k: torch.from_numpy(v).to(self.device) for k, v in batch.items() if k != "labels"}
        return self.model(**given).logits.float().cpu().numpy()


def read_table(file: str) -> tuple[list[str], list[dict]]:
    """(columns, rows) of a labelled --file for `ftcli evaluate`: a .csv, .tsv or .jsonl file (optionally .gz, local or
    gs://), read by the trainer's own reader before any model is downloaded."""
    from ftcli_trainer import data
    from ftcli_trainer.errors import DataError

    try:
        return data.read_rows(file)
    except DataError as e:
        raise UsageError(str(e), hint=e.hint) from None


@dataclass
class Evaluation:
    """`ftcli evaluate`'s result: `metrics` (what it prints and --json gives) and the outputs it came from, the
    truth and the model's outputs row by row (what --report draws)."""

    metrics: dict
    labels: np.ndarray  # ids; multi-label a 0/1 matrix; regression the targets
    logits: np.ndarray  # rows x labels


def evaluate(path: Path, file: str, columns: list[str], rows: list[dict], *, text_column: str | None = None,
             text_pair_column: str | None = None, label_column: str | None = None,
             threshold: float | None = None, label_names: tuple[str, ...] = (),
             notify: Notify | None = None, progress: Callable[[int, int], None] | None = None) -> Evaluation:
    """The model in `path` scored on labelled rows (read_table's): the metrics its own run's evaluation reports
    (metrics.of_logits: accuracy, macro-F1 and the task's own, per-label scores and the confusion matrix; micro/macro-F1
    multi-label; Pearson, Spearman and MSE for a regression), with the loss. The rows are read as the trainer reads an
    eval file, with the model's columns (or the ones given) and its labels in its own id order: a label the model does
    not have is refused, naming the row. Whole numbers are the model's ids where its labels have an id order of their
    own (--label-names, a Hub task's, a model from elsewhere), or `label_names`' (the file's names in id order); a
    model whose names were read off its training data has none, and a number is refused. `progress(done, total)` is
    called as the examples are scored."""
    from ftcli_trainer import data, metrics
    from ftcli_trainer.errors import DataError
    from ftcli_trainer.tasks import TASKS

    # (None, a model from elsewhere, is not {}: _pairs_of({}) says "single texts", and --text-pair-column was refused)
    known = run_config(path)
    trained_pairs = _pairs_of(known)
    run = known or {}
    # (it said "ftcli predict needs the trainer's"; the characters of every column: more than those scored, never less)
    c = _Classifier(path, run, threshold, "ftcli evaluate", notify,
                    chars=sum(len(str(v)) for row in rows for v in row.values()))
    cfg, by_columns = _evaluation_config(path, c, run, trained_pairs, columns, file, text_column, text_pair_column,
                                         label_column, label_names)
    task = cfg.task
    if label_names:  # the file's ids, as names (and so the model's ids)
        _ids_as_names(rows, file, cfg.label_column, label_names, c.names)
    try:
        examples, _ = data.rows_to_examples(rows, columns, cfg, file, None if c.regression else c.names,
                                            lists=c.multi and not by_columns)
    except DataError as e:
        # --label-names here names what a file's ids stand for: "with every label" sent the user to a second refusal
        raise UsageError(str(e), hint=e.hint and e.hint.replace(
            data.EVERY_LABEL, "pass --label-column with the column that holds the model's labels")) from None
    n = len(examples)
    if notify:  # (a big file on a CPU: minutes)
        notify(f"scoring {n:,} example{'s' if n != 1 else ''} of {file}")
        kept, own = run.get("max_eval_samples"), str(run.get("eval_file") or "")
        if isinstance(kept, int) and kept < n and own and own.rsplit("/", 1)[-1] == file.rsplit("/", 1)[-1]:
            # (the run's own eval file, whose numbers then differ from metrics.json's for no reason said)
            notify(f"the run evaluated a seeded {kept:,} of the {n:,} rows of its eval file {own} "
                   f"(--max-eval-samples {kept}): these metrics are on all {n:,}, not metrics.json's")
    logits = c.logits(examples.texts, list(examples.pairs) if examples.pairs is not None else [None] * n, progress)
    found = metrics.of_logits(logits, examples.labels, c.names, TASKS[task].metrics if task in TASKS else (),
                              is_multi_label=c.multi, is_regression=c.regression, threshold=c.threshold)
    return Evaluation({"model": str(path), "file": file, "examples": n,
                       **({"labels": c.names} if not c.regression else {}),
                       **({"threshold": c.threshold} if c.multi else {}), **found}, examples.labels, logits)


def _evaluation_config(path: Path, c: _Classifier, run: dict, trained_pairs: tuple[str, str] | Literal[False] | None,
                       columns: list[str], file: str, text_column: str | None, text_pair_column: str | None,
                       label_column: str | None, label_names: tuple[str, ...]) -> tuple[TrainConfig, bool]:
    """(the TrainConfig the trainer would read `file` as an eval file with, whether its labels are 0/1 columns) for
    ftcli evaluate, after what the model and the file say of the options: each refusal one line."""
    from ftcli_trainer import data
    from ftcli_trainer.config import TrainConfig
    from ftcli_trainer.errors import DataError
    from ftcli_trainer.tasks import TASKS

    if text_pair_column is not None and trained_pairs is False:
        raise UsageError(f"{path} was trained on single texts, not pairs", hint="drop --text-pair-column")
    task = str(run.get("task")) if run.get("task") in TASKS else "csv"
    # --label-columns: a 0/1 column per label. A multi-label model from elsewhere (or trained on lists) says nothing of
    # the file's shape: its labels' 0/1 columns are read where the file has them all and no label column (a
    # one-hot CSV such as Jigsaw's was refused: "has no column 'label'; pass ... --label-columns", no such flag here)
    by_columns = c.multi and (bool(run.get("label_columns")) or (
        label_column is None and str(run.get("label_column") or "label") not in columns
        and all(n in columns for n in c.names)))
    if label_column is not None and by_columns:
        raise UsageError(f"{path} was trained on label columns ({', '.join(c.names)}), one 0/1 column per label",
                         hint="drop --label-column: each row needs those columns")
    if label_names and (c.regression or c.multi):
        raise UsageError(f"--label-names names a single-label model's labels; {path} is "
                         f"{'a regression' if c.regression else 'multi-label'}", hint="drop --label-names")
    if unknown := [n for n in label_names if n not in c.names]:
        raise UsageError(f"--label-names: {', '.join(map(repr, unknown))} not among {path}'s labels "
                         f"({', '.join(c.names)})", hint="name the file's labels in its id order, as the model names "
                                                         "them")
    # The model's names in an id order that numbers in a file may follow: given to it (--label-names, a Hub task's),
    # or its own (no ftcli_run.json: a model from elsewhere). Names read off the training data (sorted) have none:
    # MNLI's 0/1/2 are entailment, neutral, contradiction, not contradiction, entailment, neutral.
    ordered = not c.regression and (not run or bool(run.get("label_names")) or bool(task in TASKS and
                                                                                   TASKS[task].labels))
    cfg = TrainConfig(task=task, text_column=text_column or _text_column(run),
                      text_pair_column=text_pair_column or (trained_pairs[1] if trained_pairs else None),
                      label_column=label_column or str(run.get("label_column") or "label"),
                      label_columns=",".join(c.names) if by_columns else None, regression=c.regression,
                      label_names=tuple(c.names) if ordered or label_names else ())
    if cfg.text_pair_column == cfg.text_column:  # (each row scored as the text paired with itself, with no word)
        given = "the --text-column" if text_column is not None else "the model's text column"
        raise UsageError(f"--text-pair-column {cfg.text_pair_column!r} is {given} too: a pair needs two columns",
                         hint="name the column that holds each row's second text")
    for flag, column in (("--text-column", cfg.text_column), ("--text-pair-column", cfg.text_pair_column)):
        if column and column == cfg.label_column and not by_columns:  # (the label scored as the text, exit 0)
            raise UsageError(f"{flag} {column!r} is the label column too: the model would read each row's label as "
                             "its text", hint="name the text's column (or --label-column the label's)")
    # the columns first, with this command's flags in the fix (the trainer's named --label-columns, not one here)
    wanted = [cfg.text_column, *filter(None, [cfg.text_pair_column]), *([] if by_columns else [cfg.label_column])]
    flags = {cfg.text_column: "--text-column NAME", cfg.label_column: "--label-column NAME"}
    if cfg.text_pair_column:
        flags[cfg.text_pair_column] = "--text-pair-column NAME"
    if c.multi and not by_columns:
        flags[cfg.label_column] = (f"give each row its labels as a list (in the column --label-column names), or a 0/1 "
                                   f"column per label ({', '.join(c.names)})")
    try:
        data.require_columns(columns, wanted, file, flags)
    except DataError as e:
        raise UsageError(str(e), hint=e.hint) from None
    return cfg, by_columns


def _ids_as_names(rows: list[dict], file: str, column: str, label_names: tuple[str, ...], names: list[str]) -> None:
    """--label-names: each row's label id in `column` replaced by the name it stands for (in place)."""
    from ftcli_trainer import data

    for i, row in enumerate(rows):
        kind, key = data.label_key(row.get(column)) if row.get(column) is not None else ("", "")
        if kind == "number" and key.isdigit() and int(key) < len(label_names):
            row[column] = label_names[int(key)]
        elif kind == "number" and key.isdigit() and key not in names:
            # (it went on as the model's own id: --label-names a,b with a file's 2 scored as the model's third)
            raise UsageError(f"{file} {data.row_position(rows, i)}: label {key!r} is an id, but --label-names "
                             f"names ids 0 to {len(label_names) - 1} only",
                             hint="give --label-names a name for every id the file uses, in id order")
