#include "bind_common.h"

int tiled_forward(const fk::AttnArgs& a, cudaStream_t stream);
int tiled_backward(const fk::AttnArgs& a, cudaStream_t stream);

FK_BIND_FWD(tiled_forward, "tiled")
FK_BIND_BWD(tiled_backward, "tiled")
