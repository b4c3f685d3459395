"""Fetching a dataset that is not on disk yet (paper appendix, "Datasets"): what torchvision's CIFAR-100, CIFAR-10,
Fashion-MNIST, MNIST and Food-101 classes download, from their own sites or from --data-mirror.

published          -- the files, md5 sums and URLs a torchvision dataset class publishes (datasets.DATASETS names
                      each dataset's class; this module knows no dataset by name)
fetch              -- download each file, check its published md5, extract it with torchvision, move it into the
                      folder torchvision's class reads; a failure leaves --data-dir as it was
DownloadError      -- a DataError whose one line says which failed: the network (no whole file came) or the
                      integrity check (a whole file came, but not the published one)
tidy_after_failure -- a failed step leaves none of the folders it made

The URLs, file names and md5 sums are the classes' own attributes, read at each call; the extraction is
torchvision's extract_archive, so the files land where the classes look for them. Only the transfer is ours.
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
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zlib

from torchvision.datasets.utils import extract_archive

from training.images import DataError, first_line

TIMEOUT = 60  # seconds without a byte before a download counts as failed
CHUNK = 1 << 20


def published(c):
    """The files torchvision's dataset class c publishes: ([(file, md5, [its URLs])], the folder they end up in under
    data_dir, whether that folder comes out of one archive). Read from the class now, not at import, in the three
    forms torchvision's classes publish them: one archive (CIFAR's), one archive at _URL (Food-101's), or IDX files
    at mirrors (MNIST's and its kind). Any other class: a DataError, and nothing fetched."""
    if all(hasattr(c, a) for a in ("filename", "tgz_md5", "url", "base_folder")):
        return [(c.filename, c.tgz_md5, [c.url])], c.base_folder, True
    if all(hasattr(c, a) for a in ("_URL", "_MD5")):
        return [(os.path.basename(c._URL), c._MD5, [c._URL])], "food-101", True
    if all(hasattr(c, a) for a in ("resources", "mirrors")):
        return [(f, md5, [site + f for site in c.mirrors]) for f, md5 in c.resources], os.path.join(c.__name__, "raw"), False
    raise DataError(f"torchvision's {c.__name__} publishes its files in a form this project does not fetch; put them "
                    f"in place by hand")


class DownloadError(DataError):
    """A download that failed; str(error) is one line that starts with 'network failure' or 'integrity failure'."""


class _NoFile(Exception):
    """One URL gave no whole file."""


def fetch(c, data_dir, mirror=None):
    """Download the files of torchvision's dataset class c (published) into data_dir/<its folder>, from `mirror` if
    given, else from the class's own URLs.

    Every file goes to a staging folder under data_dir first; the dataset's folder appears only after each file
    has come whole, matched its md5 and been extracted. Whatever fails, the staging folder is removed, and so is
    every folder this call made. Raises DownloadError (network, integrity), DataError (a disk error).
    """
    files, folder, archive = published(c)
    target = os.path.join(data_dir, folder)
    if mirror and urllib.parse.urlsplit(mirror).scheme not in ("http", "https", "file"):
        raise DataError(f"--data-mirror {mirror} is not a URL; give one that starts with http://, https:// or file://")
    if archive and os.path.exists(target):  # the loader found it incomplete
        raise DataError(f"{target} is there but incomplete; delete it to download {files[0][0]} again")
    try:
        with tidy_after_failure(os.path.dirname(target)):
            os.makedirs(data_dir, exist_ok=True)
            staging = tempfile.mkdtemp(prefix=".download-", dir=data_dir)
            try:
                for file, md5, urls in files:
                    path = os.path.join(staging, file)
                    _download(file, md5, [mirror.rstrip("/") + "/" + file] if mirror else urls, mirror, path)
                    _extract(path, staging, folder if archive else None)
                if archive:
                    os.replace(os.path.join(staging, folder), target)
                else:  # each .gz beside its plain file, as torchvision's own download leaves raw/
                    os.makedirs(target, exist_ok=True)
                    for file in (f for file, _, _ in files for f in (file, file[:-len(".gz")])):
                        os.replace(os.path.join(staging, file), os.path.join(target, file))
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
