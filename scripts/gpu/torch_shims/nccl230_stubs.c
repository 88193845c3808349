/* The eleven NCCL 2.30 functions torch 2.14.1's libtorch_cuda.so links that the GPU machine's NCCL 2.28.9 lacks
 * (nm -D on both wheels), as stubs that return ncclInvalidUsage: torch then loads beside the machine's NCCL instead
 * of carrying NCCL 2.30.7 (206 MiB). Only communicator grow/suspend/resume, memory stats, signals and symmetric
 * windows call them; a one-GPU server uses none. LD_PRELOAD it (no dependencies): scripts/gpu/torch_shims/build.sh */
#define NCCL_INVALID_USAGE 5
#define STUB(name) int name() { return NCCL_INVALID_USAGE; }
STUB(ncclCommGetUniqueId)
STUB(ncclCommGrow)
STUB(ncclCommMemStats)
STUB(ncclCommResume)
STUB(ncclCommSuspend)
STUB(ncclGetLsaMultimemDevicePointer)
STUB(ncclGetPeerDevicePointer)
STUB(ncclPutSignal)
STUB(ncclSignal)
STUB(ncclWaitSignal)
STUB(ncclWinGetUserPtr)
