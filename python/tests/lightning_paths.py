# SPDX-License-Identifier: MIT
"""ferry.torch.DataLoader through the PyTorch Lightning paths that re-create
a loader from its constructor arguments: trainer.predict(dataloaders=...)
and fit with strategy="ddp" on one device. Run on a CUDA machine with
Lightning (bench/gpu.sh's tests step), without $FERRY_SOCKET: the socket
must survive the re-creation. Exits 0 when both paths saw every sample, 77
without Lightning or CUDA.

    lightning_paths.py SOCKET
"""

import os
import sys

if not os.environ.get("FERRY_TEST_INSTALLED"):  # else the ferry installed (tests/wheel_test.sh: the wheel's)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

try:
    import lightning as L
except ImportError:
    try:
        import pytorch_lightning as L
    except ImportError:
        sys.exit(77)
import torch  # noqa: E402
from torch.utils.data import Dataset  # noqa: E402

import ferry.torch as ft  # noqa: E402


class Numbers(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.full((8,), float(i))


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Linear(8, 1)
        self.seen = []

    def training_step(self, batch, i):
        self.seen.append(batch[:, 0].sum().item())
        return self.w(batch).sum()

    def predict_step(self, batch, i):
        assert batch.is_cuda
        return batch[:, 0].sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def main():
    if not torch.cuda.is_available():
        sys.exit(77)
    socket = sys.argv[1]
    os.environ.pop("FERRY_SOCKET", None)
    want = float(sum(range(64)))

    def loader():
        return ft.DataLoader(Numbers(), batch_size=8, num_workers=2, device="cuda:0", socket=socket)

    kw = dict(accelerator="gpu", devices=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False)
    got = L.Trainer(**kw).predict(Model(), dataloaders=loader())
    ok = sum(float(x) for x in got) == want
    print(f"lightning predict: {sum(float(x) for x in got)} of {want}: {'ok' if ok else 'WRONG'}")
    m = Model()
    L.Trainer(strategy="ddp", max_epochs=1, **kw).fit(m, train_dataloaders=loader())
    fit_ok = sum(m.seen) == want
    print(f"lightning ddp fit: {sum(m.seen)} of {want}: {'ok' if fit_ok else 'WRONG'}")
    sys.exit(0 if ok and fit_ok else 1)


if __name__ == "__main__":
    main()
