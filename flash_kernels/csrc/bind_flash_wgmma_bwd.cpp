#include "bind_common.h"

int flash_wgmma_backward(const fk::AttnArgs& a, cudaStream_t stream);

FK_BIND_BWD(flash_wgmma_backward, "flash_wgmma")
