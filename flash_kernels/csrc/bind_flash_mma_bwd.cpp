#include "bind_common.h"

int flash_mma_backward(const fk::AttnArgs& a, cudaStream_t stream);

FK_BIND_BWD(flash_mma_backward, "flash_mma")
