#include "bind_common.h"

int flash_decode_wgmma_forward(const fk::AttnArgs& a, cudaStream_t stream);

FK_BIND_FWD(flash_decode_wgmma_forward, "flash_decode_wgmma")
