"""A user's attention implementation, as a test stands one in for ``--impl tests.stand_in:my_attention``
(torch only when called)."""


def my_attention(q, k, v, *, causal=False, scale=None):
    import torch.nn.functional as F

    gqa = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, **gqa)
