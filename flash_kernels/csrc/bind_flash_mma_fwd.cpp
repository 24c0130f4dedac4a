#include "bind_common.h"

int flash_mma_forward(const fk::AttnArgs& a, cudaStream_t stream);

FK_BIND_FWD(flash_mma_forward, "flash_mma")
