#include "bind_common.h"

int flash_fa1_forward(const fk::AttnArgs& a, cudaStream_t stream);

FK_BIND_FWD(flash_fa1_forward, "flash_fa1")
