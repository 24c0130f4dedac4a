"""A user's attention implementation, as a test stands one in for ``--impl tests.stand_in:my_attention``
(torch only when called)."""


def my_attention(q, k, v, *, causal=False, scale=None):
    import torch.nn.functional as F

    gqa = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, **gqa)


#: calls of built_attention's setup in this process (the workload's --setup-only runs it)
SETUPS: list[str] = []


def _build() -> None:
    SETUPS.append("built")
    print("stand-in setup: built")


def _make_built_attention():
    from nsightlab.problems.impls import Implementation

    return Implementation("built_attention", "tests.stand_in:my_attention", setup=_build,
                          description="my_attention with a setup step (as a kernel package builds its kernels)")


#: ``--impl tests.stand_in:built_attention``: an implementation whose setup must run before the profilers
built_attention = _make_built_attention()
