"""Offline stand-ins for bench/corpus.py: the corpus's scripts run with no network.

Python imports ``sitecustomize`` at start-up from the first folder of sys.path that has one;
``bench/corpus.py --standins bench/standins`` puts this folder first on PYTHONPATH and sets
DDPIFY_BENCH_STANDINS=1. Without that variable this module does nothing. With it:

* torchvision's downloading datasets write small deterministic random data instead of
  downloading, in the files and folders the real ones use (so a script that checks for them,
  or reads ``.data``/``.targets``/``.train_data``, finds what it expects), and the real
  torchvision classes then load it: MNIST, FashionMNIST and KMNIST (``ROOT/MNIST/raw/...``),
  CIFAR10 and CIFAR100 (``ROOT/cifar-10-batches-py/...``), DDPIFY_BENCH_TRAIN_SIZE (256) and
  DDPIFY_BENCH_TEST_SIZE (64) samples, random pixels and labels from a seed fixed by the
  dataset's class and split. The data is written whenever it is missing, ``download=True`` or
  not (as on a machine where it was prepared beforehand);
* ``ImageFolder(root)`` with a missing or empty root fills it with 2 class folders of 8 random
  64x64 PNGs each (DDPIFY_BENCH_IMAGE_SIZE);
* pretrained torchvision weights (``vgg16(weights=...)``, ``pretrained=True``) are not
  downloaded: the model gets the same fixed weights in every process (its layers' own
  initialisation, from seed 0, leaving the global random state as it was);
* ``urllib.request.urlopen`` of the BSDS300 archive (pytorch/examples super_resolution) returns
  a small generated .tgz of JPEGs after DDPIFY_BENCH_DOWNLOAD_SECONDS (1) seconds, as a slow
  network would; other URLs are left alone (and fail: there is no network);
* torchvision imports on a CPU-only torch although the PyPI wheel's C++ ops (built for CUDA)
  do not load: the schemas of ``torchvision::nms``/``qnms``, which torchvision registers fake
  kernels for unconditionally, are declared, without kernels (``torchvision.ops.nms`` still
  raises torchvision's own "Couldn't load custom C++ ops");
* ``PIL.Image.ANTIALIAS``, ``LINEAR`` and ``CUBIC``, removed in Pillow 10, are aliases again
  (of LANCZOS, BILINEAR, BICUBIC), for scripts written before it;
* on a machine without CUDA, ``.cuda()`` of a tensor or a module returns it unchanged (it
  stays on the CPU), so that a script that moves to the GPU unconditionally (akamaster's
  ``model.cuda()``) runs here as it would on one GPU; a conversion moves to its process's
  device instead and never calls it;
* ``os.popen("stty size")`` answers ``24 80`` when there is no terminal to ask (kuangliu's
  and mixup-cifar10's ``utils.py`` read the terminal's width at import, and fail without one);
* WANDB_MODE=disabled and MPLBACKEND=Agg unless set, and the ``fallback/`` folder is appended
  to sys.path: a no-op ``wandb`` for when the real one is not installed, and a small
  ``tensorboard_logger`` (the real one no longer imports with today's protobuf) that writes
  its values as lines of text.

The stand-ins write with ``os.open`` into a temporary name then ``os.replace``: several ranks
writing the same data never see a half-written file, and ``ddpify verify`` (which records
files opened with ``open``) does not count these writes as the script's. So a conversion that
lets every rank "download" at once does not crash here as it may on a real network (except
for the BSDS300 archive, which the script itself writes and unpacks).

Everything is patched lazily, when the module concerned is first imported, so a process that
never imports torchvision pays nothing.
"""

from __future__ import annotations

import os
import sys

ACTIVE = os.environ.get("DDPIFY_BENCH_STANDINS") == "1"


def _size(name: str, default: int) -> int:
    try:
        return max(1, int(os.environ.get(name, default)))
    except ValueError:
        return default


def _rng(*key: object):
    import zlib

    import numpy as np

    return np.random.RandomState(zlib.crc32(repr(key).encode()))


def _write(path: str, data: bytes) -> None:
    """Write `data` to `path` atomically, without going through builtins.open."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    temporary = f"{path}.standin-{os.getpid()}"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(descriptor, view) :]
    finally:
        os.close(descriptor)
    os.replace(temporary, path)


def _png(array) -> bytes:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


# --- torchvision datasets -------------------------------------------------------------------


def _mnist_files(dataset) -> None:
    """The four raw files of an MNIST-like dataset (both splits, as the real download)."""
    import struct

    import numpy as np

    name = type(dataset).__name__
    for split, count in (("train", _size("DDPIFY_BENCH_TRAIN_SIZE", 256)),
                         ("t10k", _size("DDPIFY_BENCH_TEST_SIZE", 64))):  # fmt: skip
        images = os.path.join(dataset.raw_folder, f"{split}-images-idx3-ubyte")
        labels = os.path.join(dataset.raw_folder, f"{split}-labels-idx1-ubyte")
        if os.path.isfile(images) and os.path.isfile(labels):
            continue
        rng = _rng(name, split)
        pixels = rng.randint(0, 256, size=(count, 28, 28)).astype(np.uint8)
        targets = rng.randint(0, 10, size=count).astype(np.uint8)
        _write(images, struct.pack(">IIII", 0x803, count, 28, 28) + pixels.tobytes())
        _write(labels, struct.pack(">II", 0x801, count) + targets.tobytes())


def _cifar_files(dataset) -> None:
    """The pickled batches and meta file of CIFAR10/CIFAR100."""
    import pickle

    import numpy as np

    folder = os.path.join(dataset.root, dataset.base_folder)
    hundred = dataset.meta["key"] == "fine_label_names"
    classes = 100 if hundred else 10
    meta = os.path.join(folder, dataset.meta["filename"])
    if not os.path.isfile(meta):
        names = [f"class{i}" for i in range(classes)]
        content = {dataset.meta["key"]: names}
        if hundred:
            content["coarse_label_names"] = [f"superclass{i}" for i in range(20)]
        _write(meta, pickle.dumps(content))
    for files, total in ((dataset.train_list, _size("DDPIFY_BENCH_TRAIN_SIZE", 256)),
                         (dataset.test_list, _size("DDPIFY_BENCH_TEST_SIZE", 64))):  # fmt: skip
        shares = [total // len(files) + (i < total % len(files)) for i in range(len(files))]
        for (filename, _), count in zip(files, shares, strict=True):
            path = os.path.join(folder, filename)
            if os.path.isfile(path):
                continue
            rng = _rng(type(dataset).__name__, filename)
            entry = {"data": rng.randint(0, 256, size=(count, 3072)).astype(np.uint8)}
            labels = rng.randint(0, classes, size=count).tolist()
            if hundred:
                entry.update(fine_labels=labels, coarse_labels=[label // 5 for label in labels])
            else:
                entry["labels"] = labels
            _write(path, pickle.dumps(entry))


def _image_folder(root: str) -> None:
    """Fill a missing or empty ImageFolder root with two classes of random PNGs, made in a
    temporary folder renamed to `root` (another process sees all of them or none)."""
    import shutil

    if os.path.isdir(root) and os.listdir(root):
        return
    side = _size("DDPIFY_BENCH_IMAGE_SIZE", 64)
    rng = _rng("ImageFolder", side)
    temporary = f"{root.rstrip(os.sep)}.standin-{os.getpid()}"
    for label in range(2):
        for index in range(8):
            pixels = rng.randint(0, 256, size=(side, side, 3)).astype("uint8")
            _write(os.path.join(temporary, f"class{label}", f"{index:03d}.png"), _png(pixels))
    try:
        os.rename(temporary, root)  # replaces an empty folder; fails if another process won
    except OSError:
        shutil.rmtree(temporary, ignore_errors=True)


def _patch_datasets(torchvision) -> None:
    from torchvision.datasets import cifar, folder, mnist

    def mnist_download(self) -> None:
        _mnist_files(self)

    real_mnist_exists = mnist.MNIST._check_exists

    def mnist_exists(self) -> bool:
        _mnist_files(self)
        return real_mnist_exists(self)

    # FashionMNIST and KMNIST inherit both; EMNIST and QMNIST (other files) override both
    mnist.MNIST.download = mnist_download
    mnist.MNIST._check_exists = mnist_exists

    def cifar_ready(self) -> bool:
        _cifar_files(self)
        return True

    for cls in (cifar.CIFAR10, cifar.CIFAR100):
        # check_integrity(path, None) checks only that the file exists
        cls.train_list = [[name, None] for name, _ in cls.train_list]
        cls.test_list = [[name, None] for name, _ in cls.test_list]
        cls.meta = {**cls.meta, "md5": None}
    cifar.CIFAR10.download = lambda self: None
    cifar.CIFAR10._check_integrity = cifar_ready

    real_image_folder_init = folder.ImageFolder.__init__

    def image_folder_init(self, root, *args, **kwargs) -> None:
        _image_folder(os.fspath(root))
        real_image_folder_init(self, root, *args, **kwargs)

    folder.ImageFolder.__init__ = image_folder_init


def _patch_weights(torchvision) -> None:
    import torch
    from torchvision.models import _api

    real_get_state_dict = _api.WeightsEnum.get_state_dict

    def get_state_dict(self, *args, **kwargs):
        # torchvision's builders do `model.load_state_dict(weights.get_state_dict(...))`
        model = sys._getframe(1).f_locals.get("model")
        if not isinstance(model, torch.nn.Module):
            return real_get_state_dict(self, *args, **kwargs)
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(0)
            for module in model.modules():
                reset = getattr(module, "reset_parameters", None)
                if callable(reset):
                    reset()
            return {key: value.detach().clone() for key, value in model.state_dict().items()}

    _api.WeightsEnum.get_state_dict = get_state_dict


def _declare_ops(module) -> None:
    """Before torchvision._meta_registrations: declare the ops it registers fake kernels for
    unconditionally, when torchvision's C++ extension did not load."""
    import torch
    import torchvision.extension

    if torchvision.extension._has_ops():
        return
    library = torch.library.Library("torchvision", "FRAGMENT")
    for op in ("nms", "qnms"):
        library.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _KEEP.append(library)  # the declarations last as long as the Library object


# --- the network -----------------------------------------------------------------------------

BSDS300 = "BSDS300-images.tgz"


def _bsds300() -> bytes:
    """A small BSDS300-images.tgz: BSDS300/images/{train,test}/*.jpg."""
    import io
    import tarfile

    from PIL import Image

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for split, count in (("train", 16), ("test", 8)):
            rng = _rng("BSDS300", split)
            for index in range(count):
                pixels = rng.randint(0, 256, size=(64, 96, 3)).astype("uint8")
                image = io.BytesIO()
                Image.fromarray(pixels).save(image, format="JPEG")
                info = tarfile.TarInfo(f"BSDS300/images/{split}/{index:03d}.jpg")
                info.size = len(image.getvalue())
                image.seek(0)
                archive.addfile(info, image)
    return buffer.getvalue()


def _patch_urlopen(module) -> None:
    import io
    import time

    real_urlopen = module.urlopen

    class Response(io.BytesIO):
        status = 200

        def getcode(self) -> int:
            return 200

    def urlopen(url, *args, **kwargs):
        address = getattr(url, "full_url", url)
        if isinstance(address, str) and address.endswith("/" + BSDS300):
            time.sleep(float(os.environ.get("DDPIFY_BENCH_DOWNLOAD_SECONDS", "1")))
            response = Response(_bsds300())
            response.length = len(response.getvalue())
            return response
        return real_urlopen(url, *args, **kwargs)

    module.urlopen = urlopen


# --- Pillow ------------------------------------------------------------------------------------


def _patch_pillow(module) -> None:
    """The resampling aliases Pillow 10 removed, for scripts written before it."""
    for old, new in (("ANTIALIAS", "LANCZOS"), ("LINEAR", "BILINEAR"), ("CUBIC", "BICUBIC")):
        if not hasattr(module, old):
            setattr(module, old, getattr(module, new))


# --- lazy patching ---------------------------------------------------------------------------


def _patch_cuda(torch) -> None:
    if torch.cuda.is_available():
        return

    def stay(self, *args, **kwargs):
        return self

    torch.Tensor.cuda = stay
    torch.nn.Module.cuda = stay


_KEEP: list[object] = []
# module name -> (run before the module's code, run after it)
_PATCHES = {
    "torchvision._meta_registrations": (_declare_ops, None),
    "torchvision": (None, lambda module: (_patch_datasets(module), _patch_weights(module))),
    "urllib.request": (None, _patch_urlopen),
    "PIL.Image": (None, _patch_pillow),
    "torch": (None, _patch_cuda),
}


def _patch_stty() -> None:
    import io

    popen = os.popen

    def answer(command, *args, **kwargs):
        if command.strip() == "stty size" and not sys.stdin.isatty():
            return io.StringIO("24 80\n")
        return popen(command, *args, **kwargs)

    os.popen = answer


def _install() -> None:
    import importlib.abc

    class Finder(importlib.abc.MetaPathFinder):
        """Finds nothing itself: wraps the loader the other finders return for a patched
        module so that the patches run around the module's own code."""

        def find_spec(self, name, path, target=None):
            if name not in _PATCHES:
                return None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
            else:
                return None
            loader = spec.loader
            if loader is None or not hasattr(loader, "exec_module"):
                return spec
            before, after = _PATCHES.pop(name)
            exec_module = loader.exec_module

            def run(module) -> None:
                if before is not None:
                    before(module)
                exec_module(module)
                if after is not None:
                    after(module)

            loader.exec_module = run
            return spec

    sys.meta_path.insert(0, Finder())
    _patch_stty()
    sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "fallback"))
    os.environ.setdefault("WANDB_MODE", "disabled")
    os.environ.setdefault("MPLBACKEND", "Agg")


if ACTIVE:
    _install()
