"""Every download path end to end, offline: a real HTTP server on 127.0.0.1, started and stopped here, serves tiny
copies of the published files in their published formats and names (cifar-100-python.tar.gz, cifar-10-python.tar.gz,
Fashion-MNIST's and MNIST's gzipped IDX files, SVHN's .mat files, food-101.tar.gz) to train.py's --data-mirror.
train.py downloads them, checks their md5, extracts them with torchvision into the folders torchvision's classes
read, reads them through those classes and readers (CIFAR's pickles only after torchvision has checked their md5)
and trains one epoch. Each
way a download fails (a refused connection, a 404, a connection cut short, a file cut short, a file with another md5)
is one line that names the network or the integrity failure, exit 2, and leaves --data-dir as it was, down to the
folders above it that the download made. The README's main command on a machine without network says so in one line.
No request leaves the loopback address.

A download is checked against the md5 sums torchvision's classes publish, read off each class by the form its record
names (Dataset.published). The tiny copies have their own: the tests set those on the classes, in this process and
this test only (conftest puts the real ones back), except where the published sum is the point. The helpers that
make the tiny published files and set their sums read the form from the record, and fail on a form they do not know.
"""
import hashlib
import http.server
import io
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import threading

import numpy as np
import pytest
import torch
from test_datasets import publish

import train
from training import download
from training.datasets import DATASETS, FileImages, load_dataset

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root
PUBLISHED = tuple(n for n, d in DATASETS.items() if d.published())  # every dataset with a download (the registry's)
TRAINED = ("cifar100", "mnist", "food101")  # one training run per kind of data: pickles, IDX files, JPEG files
RUN = ["--arch", "cnn", "--epochs", "1", "--batch-size", "4", "--device", "cpu", "--workers", "0"]


# ---------------------------------------------------------------- the published files, tiny, and a server

class Tiny(dict):
    """{dataset: (the folder its tiny files were written in, {published file name: bytes})}, each made on first use
    from its record's tiny copy (Dataset.tiny, written where its reader reads it with --data-dir <the folder>: an
    archive's folder, the .gz files, the plain files in their folder). A copy whose writer needs a module that is not
    installed (SVHN's, scipy) skips each test that asks for it, and only those."""

    def __init__(self, root):
        super().__init__()
        self.root = root

    def __missing__(self, name):
        copy = DATASETS[name].tiny
        if copy is None:
            pytest.fail(f"{name} is published for download and its record has no tiny copy: give it one (Dataset.tiny, "
                        f"training/tiny.py)")
        p, source = DATASETS[name].published(), self.root / name
        shutil.rmtree(source, ignore_errors=True)  # what a writer that skipped before left
        source.mkdir()
        try:
            copy.write(source)
        except ImportError as e:
            pytest.skip(f"{name}'s tiny copy needs {e.name}, which is not installed")
        if p.archive:  # the archive's top folder, as the published ones
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w:gz") as tar:
                tar.add(source / p.folder, arcname=p.folder)
            files = {p.files[0][0]: buf.getvalue()}
        elif DATASETS[name].form is download.gz_files:  # written gzipped in the folder itself (a flat IDX folder)
            files = {f: (source / f).read_bytes() for f, _, _ in p.files}
        elif DATASETS[name].form is download.split_files:  # written plain in the folder the class reads
            files = {f: (source / p.folder / f).read_bytes() for f, _, _ in p.files}
        else:
            pytest.fail(f"the tests know no download form {DATASETS[name].form!r} ({name}); teach Tiny and md5s_of it")
        self[name] = (source, files)
        return self[name]


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    return Tiny(tmp_path_factory.mktemp("published"))


def test_a_writer_that_skips_skips_every_test_that_asks_for_it(tmp_path, monkeypatch):
    """Where scipy is missing, SVHN's writer skips: so does every later test that asks for SVHN's files (not a
    FileExistsError from the folder the first one made), and the other datasets' files are still made."""
    monkeypatch.setitem(sys.modules, "scipy.io", None)  # import scipy.io fails, as where scipy is not installed
    tiny = Tiny(tmp_path)
    for _ in range(2):
        with pytest.raises(pytest.skip.Exception, match="scipy"):
            tiny["svhn"]
    assert "svhn" not in tiny and tiny["mnist"][1]


class Mirror(http.server.BaseHTTPRequestHandler):
    """GET: the server's files[path] = (body, the Content-Length it announces); anything else is a 404."""

    def do_GET(self):
        if self.path not in self.server.files:
            self.send_error(404)
            return
        body, length = self.server.files[self.path]
        self.send_response(200)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        self.wfile.write(body)  # then HTTP/1.0 closes the connection, after `length` bytes or fewer

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Mirror)
    httpd.files = {}
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join(10)


@pytest.fixture
def closed_port():
    """A loopback port that refuses connections: bound, never listening."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


@pytest.fixture(autouse=True)
def no_proxy_for_loopback(monkeypatch):
    for var in ("no_proxy", "NO_PROXY"):
        monkeypatch.setenv(var, "127.0.0.1")


def serve(server, prefix, files, cut=None, short=None):
    """Put files ({name: bytes}) at <server>/<prefix>/ and return that URL. cut: each body stops halfway, after
    announcing its whole length (a dropped connection). short: each file is only its first half (cut on the server)."""
    for name, body in files.items():
        half = body[:len(body) // 2]
        server.files[f"/{prefix}/{name}"] = (half, len(body)) if cut else (half, len(half)) if short else \
            (body, len(body))
    return f"http://127.0.0.1:{server.server_address[1]}/{prefix}"


def md5s_of(name, files, source):
    """Make these files' md5 sums the published ones a download of `name` is checked against, on its torchvision
    class, where its record's form reads them; for CIFAR also those of the pickles in the archive (from `source`),
    which torchvision checks on load. A form this does not know fails the test."""
    md5 = {f: hashlib.md5(body).hexdigest() for f, body in files.items()}
    d = DATASETS[name]
    c = d.torchvision()
    if d.form is download.archive:
        (file, _, _), = d.published().files
        setattr(c, "tgz_md5" if hasattr(c, "tgz_md5") else "_MD5", md5[file])
        if hasattr(c, "train_list"):
            publish(name, source)
    elif d.form is download.gz_files:
        c.resources = [(f, md5[f]) for f, _ in c.resources]
    elif d.form is download.split_files:
        c.split_list = {s: [url, f, md5.get(f, m)] for s, (url, f, m) in c.split_list.items()}
    else:
        pytest.fail(f"md5s_of knows no download form {d.form!r} ({name}); teach it where the form keeps its md5 sums")


def same_data(a, b):
    assert a.num_classes == b.num_classes
    for x, y in ((a.train, b.train), (a.tests["test"], b.tests["test"])):
        assert np.array_equal(x.labels, y.labels)
        if isinstance(x, FileImages):
            assert [os.path.relpath(p, os.path.dirname(os.path.dirname(p))) for p in x.paths] == \
                   [os.path.relpath(p, os.path.dirname(os.path.dirname(p))) for p in y.paths]
            assert all(open(p, "rb").read() == open(q, "rb").read() for p, q in zip(x.paths, y.paths))
        else:
            assert torch.equal(x.images, y.images)


# ---------------------------------------------------------------- downloads that work

@pytest.mark.parametrize("name", PUBLISHED)
def test_train_py_downloads_checks_extracts_reads_and_trains(tmp_path, server, published, name):
    source, files = published[name]
    md5s_of(name, files, source)
    mirror = serve(server, f"ok-{name}", files)
    data = tmp_path / "data"  # not there yet: the download makes it
    if name in TRAINED:
        summary = train.main(["--dataset", name, "--data-dir", str(data), "--data-mirror", mirror, "--out",
                              str(tmp_path / "run"), *RUN, *DATASETS[name].tiny.flags])
        assert 0 <= summary["test_acc_mean"] <= 100
    else:
        load_dataset(name, data, mirror=mirror)
    # the dataset's folder alone, no staging folder or archive beside it, and it holds exactly what was served
    assert os.listdir(data) == [DATASETS[name].published().folder.split(os.sep)[0]]
    same_data(load_dataset(name, data, download=False), load_dataset(name, source, download=False))


def test_a_mirror_may_be_a_folder(tmp_path, published):
    source, files = published["mnist"]
    md5s_of("mnist", files, source)
    (tmp_path / "mirror").mkdir()
    for f, body in files.items():
        (tmp_path / "mirror" / f).write_bytes(body)
    d = load_dataset("mnist", tmp_path / "data", mirror=(tmp_path / "mirror").as_uri())
    same_data(d, load_dataset("mnist", source, download=False))


# ---------------------------------------------------------------- downloads that fail

FAILURES = {  # how the download fails -> which failure the line must name
    "refused": "network", "404": "network", "connection cut short": "network",
    "file cut short": "integrity", "other md5": "integrity",
}


@pytest.mark.parametrize("how", FAILURES)
@pytest.mark.parametrize("name", PUBLISHED)
def test_a_failed_download_is_one_line_that_names_the_failure_and_leaves_nothing(tmp_path, capsys, server,
                                                                                 published, closed_port, name, how):
    source, files = published[name]
    if how != "other md5":  # the tiny copies' own sums; "other md5" keeps the published ones
        md5s_of(name, files, source)
    mirror = (f"http://127.0.0.1:{closed_port}/" if how == "refused" else
              serve(server, f"{how}-{name}".replace(" ", "-"), files if how != "404" else {},
                    cut=how == "connection cut short", short=how == "file cut short"))
    first = DATASETS[name].published().files[0][0]
    for made in (False, True):  # --data-dir not there yet, or there and empty: either way left as it was
        data = tmp_path / "data"
        if made:
            data.mkdir()
        with pytest.raises(SystemExit) as exit:
            train.main(["--dataset", name, "--data-dir", str(data), "--data-mirror", mirror,
                        "--out", str(tmp_path / "run"), *RUN])
        err = capsys.readouterr().err
        assert exit.value.code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        assert err.startswith("train.py: error: ") and f"{FAILURES[how]} failure" in err, err
        assert f"{mirror.rstrip('/')}/{first}" in err and "--data-dir" in err, err
        assert os.listdir(tmp_path) == (["data"] if made else []) and (not made or os.listdir(data) == [])


@pytest.mark.parametrize("name", ["cifar10", "mnist"])  # an archive into its folder; .gz files into <Class>/raw/
def test_a_failed_download_into_a_nested_data_dir_removes_every_folder_it_made(tmp_path, capsys, server, published,
                                                                               name):
    """--data-dir tmp/a/b/data, none of it there: a download that fails once it has made them (mnist: after its
    first file came whole and was extracted) removes data/, b/ and a/, and nothing above: tmp/ stays, as it was."""
    source, files = published[name]
    md5s_of(name, files, source)
    first = DATASETS[name].published().files[0][0]
    # mnist: the first file whole, then a 404; cifar10's one archive: cut short
    mirror = serve(server, f"nested-{name}", {first: files[first]}, cut=DATASETS[name].published().archive)
    (tmp_path / "kept").write_text("a file beside a/ that the download must leave")
    data = tmp_path / "a" / "b" / "data"
    with pytest.raises(SystemExit) as exit:
        train.main(["--dataset", name, "--data-dir", str(data), "--data-mirror", mirror, "--out",
                    str(tmp_path / "run"), *RUN])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and len(err.strip().splitlines()) == 1 and "network failure" in err, err
    assert sorted(os.listdir(tmp_path)) == ["kept"], os.listdir(tmp_path)


def test_a_mirror_that_is_no_url_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit:
        train.main(["--dataset", "cifar10", "--data-dir", str(tmp_path / "data"), "--data-mirror", "mirror.lan/data",
                    "--out", str(tmp_path / "run"), *RUN])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert "--data-mirror mirror.lan/data is not a URL" in err and os.listdir(tmp_path) == []


@pytest.mark.slow  # a process of its own: the second tier (python -m pytest -q -m slow lab tests)
def test_the_readme_command_offline_names_the_network_failure(tmp_path, closed_port):
    """A fresh checkout on a machine without network: the README's main command, as typed, in a folder with no data/.
    The network is a proxy that refuses every connection, so nothing leaves the loopback even where a network is."""
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("no_proxy", "all_proxy")}
    env.update(http_proxy=f"http://127.0.0.1:{closed_port}", https_proxy=f"http://127.0.0.1:{closed_port}")
    env.update(HTTP_PROXY=env["http_proxy"], HTTPS_PROXY=env["https_proxy"])
    cmd = [sys.executable, os.path.join(HERE, "train.py"), "--dataset", "cifar100", "--noise", "sym", "--rate", "0.4",
           "--mode", "progressive"]
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "network failure" in res.stderr and "NameError" not in res.stderr and "Traceback" not in res.stderr
    assert "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz cannot be reached" in res.stderr, res.stderr
    assert os.listdir(tmp_path) == []  # no data/, no runs/
