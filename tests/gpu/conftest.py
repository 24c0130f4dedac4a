"""GPU test suite: run on a machine with a CUDA GPU (see README, `make gpu-test`)."""

import pytest

torch = pytest.importorskip("torch")


def pytest_collection_modifyitems(config, items):  # noqa: ARG001
    if not torch.cuda.is_available():
        # The GPU suite must not pass by skipping: without a GPU it is an error, not a skip.
        raise pytest.UsageError("tests/gpu needs a CUDA GPU; run it on the GPU node (make gpu-test)")


@pytest.fixture(scope="session", autouse=True)
def built_kernels():
    import flash_kernels

    return flash_kernels.build()
