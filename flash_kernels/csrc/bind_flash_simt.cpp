#include "bind_common.h"

int flash_simt_forward(const fk::AttnArgs& a, cudaStream_t stream);
int flash_simt_backward(const fk::AttnArgs& a, cudaStream_t stream);

FK_BIND_FWD(flash_simt_forward, "flash_simt")
FK_BIND_BWD(flash_simt_backward, "flash_simt")
