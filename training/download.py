"""Fetching a dataset that is not on disk yet (paper appendix, "Datasets"): the files torchvision downloads for
CIFAR-100, CIFAR-10, Fashion-MNIST, MNIST and Food-101, from their own sites or from --data-mirror.

SOURCES            -- per dataset: its files with their published md5 sums, the sites that serve them, where they go
fetch              -- download, check each md5, extract, move into place; a failure leaves nothing under data_dir
DownloadError      -- a DataError whose one line says which failed: the network (no whole file came) or the
                      integrity check (a file came, but not the published one)
tidy_after_failure -- a failed step leaves none of the folders it made

The URLs and md5 sums are torchvision's (its dataset classes' attributes), so they are written once. We fetch
the files ourselves rather than through those classes: torchvision's CIFAR classes unpickle what they download
with pickle.load (we read it with safe_pickle), its downloads have no timeout and leave a half-written file
behind, and its errors do not say whether the network or the file was at fault.

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
from typing import NamedTuple

from torchvision import datasets as tv

from training.images import DataError, first_line

TIMEOUT = 60  # seconds without a byte before a download counts as failed
CHUNK = 1 << 20


class Source(NamedTuple):
    files: tuple[tuple[str, str], ...]  # (file name, its published md5)
    sites: tuple[str, ...]              # base URLs that serve every file, tried in order
    folder: str                         # where the files end up under data_dir
    archive: bool                       # True: one .tar.gz whose top folder is `folder`; False: kept as they are


def _site(url):
    return url.rsplit("/", 1)[0] + "/"


SOURCES = {
    "cifar100": Source(((tv.CIFAR100.filename, tv.CIFAR100.tgz_md5),), (_site(tv.CIFAR100.url),),
                       tv.CIFAR100.base_folder, True),
    "cifar10": Source(((tv.CIFAR10.filename, tv.CIFAR10.tgz_md5),), (_site(tv.CIFAR10.url),),
                      tv.CIFAR10.base_folder, True),
    "fashionmnist": Source(tuple(tv.FashionMNIST.resources), tuple(tv.FashionMNIST.mirrors),
                           os.path.join("FashionMNIST", "raw"), False),
    "mnist": Source(tuple(tv.MNIST.resources), tuple(tv.MNIST.mirrors), os.path.join("MNIST", "raw"), False),
    "food101": Source(((os.path.basename(tv.Food101._URL), tv.Food101._MD5),), (_site(tv.Food101._URL),),
                      "food-101", True),
}


class DownloadError(DataError):
    """A download that failed; str(error) is one line that starts with 'network failure' or 'integrity failure'."""


class _NoFile(Exception):
    """One URL gave no whole file."""


def fetch(name, data_dir, mirror=None):
    """Download dataset `name` into data_dir/SOURCES[name].folder, from `mirror` if given, else from its sites.

    Every file goes to a staging folder under data_dir first; the dataset's folder appears only after each file
    has come whole, matched its md5 and (an archive) extracted. Whatever fails, the staging folder is removed, and
    so is every folder this call made. Raises DownloadError (network, integrity), DataError (a disk error).
    """
    src = SOURCES[name]
    target = os.path.join(data_dir, src.folder)
    if mirror and urllib.parse.urlsplit(mirror).scheme not in ("http", "https", "file"):
        raise DataError(f"--data-mirror {mirror} is not a URL; give one that starts with http://, https:// or file://")
    if src.archive and os.path.exists(target):  # the loader found it incomplete
        raise DataError(f"{target} is there but incomplete; delete it to download {src.files[0][0]} again")
    try:
        with tidy_after_failure(os.path.dirname(target)):
            os.makedirs(data_dir, exist_ok=True)
            staging = tempfile.mkdtemp(prefix=".download-", dir=data_dir)
            try:
                for file, md5 in src.files:
                    _download(file, md5, src.sites, mirror, os.path.join(staging, file))
                if src.archive:
                    _extract(os.path.join(staging, src.files[0][0]), os.path.join(staging, "x"), src.folder)
                    os.replace(os.path.join(staging, "x", src.folder), target)
                else:  # the IDX files are read gzipped: they go into the folder as they came
                    os.makedirs(target, exist_ok=True)
                    for file, _ in src.files:
                        os.replace(os.path.join(staging, file), os.path.join(target, file))
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    except OSError as err:
        raise DataError(f"cannot write the download under {data_dir} ({first_line(err)}); "
                        f"check the folder's permissions and free space") from err
    return target


def _download(file, md5, sites, mirror, path):
    """One file from the mirror, or else from the first of the sites that serves it whole with the published md5."""
    network, integrity = [], []
    for site in (mirror,) if mirror else sites:
        url = site.rstrip("/") + "/" + file
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


def _extract(archive, into, folder):
    """Extract a .tar.gz that must hold `folder`; only plain files and folders inside `into` (the "data" filter)."""
    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python >= 3.10.12 / 3.11.4
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(into, **safe)
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise DownloadError(f"integrity failure: {os.path.basename(archive)} matched its md5 but cannot be "
                            f"extracted ({first_line(err)})") from err
    if not os.path.isdir(os.path.join(into, folder)):
        raise DownloadError(f"integrity failure: {os.path.basename(archive)} matched its md5 but holds no {folder}/")


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
