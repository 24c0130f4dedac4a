#include "bind_common.h"

int materialized_forward(const fk::AttnArgs& a, cudaStream_t stream);
int materialized_backward(const fk::AttnArgs& a, cudaStream_t stream);

FK_BIND_FWD(materialized_forward, "materialized")
FK_BIND_BWD(materialized_backward, "materialized")
