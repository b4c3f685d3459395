"""Fetching a dataset that is not on disk yet (paper appendix, "Datasets"): the files a torchvision dataset class
publishes, in the form its dataset record names (datasets.DATASETS), from their own sites or from --data-mirror.

Published          -- what a download brings: the files (name, md5, URLs), the folder they end up in, and whether
                      that folder comes out of one archive
archive, gz_files, split_files -- the forms torchvision's classes publish their files in, each read off the class:
                      one tar archive (CIFAR's, Food-101's), one .gz per file (MNIST's and its kind), one plain
                      file per split (SVHN's .mat files). A record names its form; a new class of a known form is
                      one edit, its record
fetch              -- download each file, check its published md5, extract it with torchvision, move it into the
                      folder torchvision's class reads; a failure leaves --data-dir as it was
DownloadError      -- a DataError whose one line says which failed: the network (no whole file came) or the
                      integrity check (a whole file came, but not the published one)
tidy_after_failure -- a failed step leaves none of the folders it made

The URLs, file names, md5 sums and folder names are the classes' own attributes, read at each call (this module
knows no dataset by name); the extraction is torchvision's extract_archive, so the files land where the classes look
for them. Only the transfer is ours.
torchvision 0.29's download (download=True), tried against a local server, fails three users that this fixes:
- whose connection drops mid-file: it reads to the early end without comparing Content-Length and then says
  "File not found or corrupted.", as for a file with another md5, so a network failure reads as corrupt data.
  _get compares the bytes with Content-Length: network failure, not integrity failure.
- whose download fails at all: it leaves the half-written or wrong file, and the folders it made, in --data-dir.
  Everything goes to a staging folder and moves into place only when whole; tidy_after_failure removes the rest.
- behind a server that stalls: it reads with no timeout, so the run hangs forever. _get gives up after TIMEOUT.

A mirror holds the files under their published names (cifar-100-python.tar.gz, train-images-idx3-ubyte.gz, ...),
at any http://, https:// or file:// URL; they are checked against the published md5 sums all the same, so a
mirror cannot hand over other data than the published one. urllib honours https_proxy/http_proxy/no_proxy.
"""
import contextlib
import gzip
import hashlib
import http.client
import os
import re
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zlib
from typing import NamedTuple

from training.images import DataError, first_line

TIMEOUT = 60  # seconds without a byte before a download counts as failed
CHUNK = 1 << 20


class Published(NamedTuple):
    """What a download of one dataset brings, read off its torchvision class by its record's form."""
    files: list    # [(file name, published md5, [its URLs])]
    folder: str    # where they end up, under data_dir: the folder torchvision's class reads
    archive: bool  # True: `folder` comes out of one archive; False: the files are moved into it (a .gz beside
    #                its plain file)


def _needs(c, attrs, form):
    """DataError unless class c has every attribute a form reads; a record that names the wrong form is refused
    before any request."""
    missing = [a for a in attrs if not hasattr(c, a)]
    if missing:
        raise DataError(f"torchvision's {c.__name__} does not publish its files as {form} (it has no "
                        f"{', '.join(missing)}); give its record in training/datasets.py the form it has, or put its "
                        f"files in place by hand")


def archive(c):
    """One tar archive that holds the dataset's folder: CIFAR's (filename, tgz_md5, url, and base_folder, the folder
    it holds), or Food-101's kind (_URL, _MD5; the folder is the archive's name without .tar.gz or .tgz, as the
    class reads it: food-101.tar.gz holds food-101/)."""
    if hasattr(c, "tgz_md5"):
        _needs(c, ("filename", "tgz_md5", "url", "base_folder"), "one tar archive")
        return Published([(c.filename, c.tgz_md5, [c.url])], c.base_folder, True)
    _needs(c, ("_URL", "_MD5"), "one tar archive")
    file = os.path.basename(urllib.parse.urlsplit(c._URL).path)
    return Published([(file, c._MD5, [c._URL])], re.sub(r"\.(tar\.gz|tgz|tar)$", "", file), True)


def gz_files(c):
    """One .gz per file at each of the class's mirrors (resources, mirrors): MNIST and its kind, into
    <Class>/raw/, where torchvision's class reads them."""
    _needs(c, ("resources", "mirrors"), "one .gz per file")
    return Published([(f, md5, [site + f for site in c.mirrors]) for f, md5 in c.resources],
                     os.path.join(c.__name__, "raw"), False)


def split_files(c, splits=("train", "test")):
    """One plain file per split (split_list: {split: [URL, file, md5]}): SVHN's .mat files, into <Class>/, the
    folder a run hands torchvision's class as its root. The splits a run reads only (SVHN's "extra" is not)."""
    _needs(c, ("split_list",), "one plain file per split")
    return Published([(c.split_list[s][1], c.split_list[s][2], [c.split_list[s][0]]) for s in splits],
                     c.__name__, False)


class DownloadError(DataError):
    """A download that failed; str(error) is one line that starts with 'network failure' or 'integrity failure'."""


class _NoFile(Exception):
    """One URL gave no whole file."""


def fetch(published, data_dir, mirror=None):
    """Download a dataset's published files (a Published, from its record's form) into data_dir/<its folder>, from
    `mirror` if given, else from the class's own URLs.

    Every file goes to a staging folder under data_dir first; the dataset's folder appears only after each file
    has come whole, matched its md5 and been extracted. Whatever fails, the staging folder is removed, and so is
    every folder this call made. Raises DownloadError (network, integrity), DataError (a disk error).
    """
    files, folder, one_archive = published
    target = os.path.join(data_dir, folder)
    if mirror and urllib.parse.urlsplit(mirror).scheme not in ("http", "https", "file"):
        raise DataError(f"--data-mirror {mirror} is not a URL; give one that starts with http://, https:// or file://")
    if one_archive and os.path.exists(target):  # the loader found it incomplete
        raise DataError(f"{target} is there but incomplete; delete it to download {files[0][0]} again")
    try:
        with tidy_after_failure(os.path.dirname(target)):
            os.makedirs(data_dir, exist_ok=True)
            staging = tempfile.mkdtemp(prefix=".download-", dir=data_dir)
            try:
                for file, md5, urls in files:
                    path = os.path.join(staging, file)
                    _download(file, md5, [mirror.rstrip("/") + "/" + file] if mirror else urls, mirror, path)
                    if one_archive or file.endswith(".gz"):  # a plain file (SVHN's .mat) is read as it came
                        _extract(path, staging, folder if one_archive else None)
                if one_archive:
                    os.replace(os.path.join(staging, folder), target)
                else:  # each .gz beside its plain file, as torchvision's own download leaves raw/
                    os.makedirs(target, exist_ok=True)
                    for file, _, _ in files:
                        for f in (file, file[:-len(".gz")]) if file.endswith(".gz") else (file,):
                            os.replace(os.path.join(staging, f), os.path.join(target, f))
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    except OSError as err:
        raise DataError(f"cannot write the download under {data_dir} ({first_line(err)}); "
                        f"check the folder's permissions and free space") from err
    return target


def _download(file, md5, urls, mirror, path):
    """One file from the first of the URLs that serves it whole with the published md5."""
    network, integrity = [], []
    for url in urls:
        try:
            got = _get(url, path)
        except _NoFile as err:
            network.append(str(err))
            continue
        if got == md5:
            return
        integrity.append(f"{url} gave a file with md5 {got}, not the published {md5}")
    if integrity:
        raise DownloadError(f"integrity failure: {'; '.join(integrity)}: " + (
            f"--data-mirror holds another file than the published {file}" if mirror else
            "the download was altered on its way, or the file changed: try again later, or --data-mirror URL"))
    raise DownloadError(f"network failure: {'; '.join(network)}; " + (
        f"check --data-mirror and that it holds {file}" if mirror else
        "check the network (a proxy: https_proxy), or pass --data-mirror URL of a copy"))


def _get(url, path):
    """Write url's body to path; return its md5. Raises _NoFile when no whole file comes."""
    digest, n = hashlib.md5(), 0
    try:
        response = urllib.request.urlopen(url, timeout=TIMEOUT)
    except urllib.error.HTTPError as err:
        raise _NoFile(f"{url} answered HTTP {err.code} {err.reason}") from err
    except urllib.error.URLError as err:  # refused, no such host, no route, a timeout, no such file:// file
        raise _NoFile(f"{url} cannot be reached ({getattr(err.reason, 'strerror', None) or err.reason})") from err
    except (OSError, http.client.HTTPException) as err:
        raise _NoFile(f"{url} cannot be reached ({first_line(err)})") from err
    with response, open(path, "wb") as f:
        size = response.headers.get("Content-Length")
        while True:
            try:
                chunk = response.read(CHUNK)
            except (OSError, http.client.HTTPException) as err:  # reset, or silent for TIMEOUT seconds
                raise _NoFile(f"{url}: the connection failed after {n} bytes ({first_line(err)})") from err
            if not chunk:
                break
            f.write(chunk)  # a disk error here is no network failure: it goes up as itself
            digest.update(chunk)
            n += len(chunk)
    if size is not None and n != int(size):
        raise _NoFile(f"{url}: the connection closed after {n} of its {size} bytes")
    return digest.hexdigest()


def _extract(path, into, folder):
    """torchvision's extract_archive: a .tar.gz into `into` (it must hold `folder`), a .gz into its plain file."""
    from torchvision.datasets.utils import extract_archive  # here: datasets.py says why
    try:
        extract_archive(path, into)
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise DownloadError(f"integrity failure: {os.path.basename(path)} matched its md5 but cannot be "
                            f"extracted ({first_line(err)})") from err
    if folder is not None and not os.path.isdir(os.path.join(into, folder)):
        raise DownloadError(f"integrity failure: {os.path.basename(path)} matched its md5 but holds no {folder}/")


@contextlib.contextmanager
def tidy_after_failure(path):
    """A step that fails leaves no trace: remove `path` and the folders above it that the step made, while empty."""
    made = []
    path = os.path.abspath(path)
    while not os.path.exists(path):
        made.append(path)
        path = os.path.dirname(path)
    try:
        yield
    except BaseException:
        for path in made:  # deepest first
            if os.path.isdir(path) and not os.listdir(path):
                os.rmdir(path)
        raise
