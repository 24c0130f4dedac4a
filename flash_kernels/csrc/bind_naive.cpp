#include "bind_common.h"

int naive_forward(const fk::AttnArgs& a, cudaStream_t stream);
int naive_backward(const fk::AttnArgs& a, cudaStream_t stream);

FK_BIND_FWD(naive_forward, "naive")
FK_BIND_BWD(naive_backward, "naive")
