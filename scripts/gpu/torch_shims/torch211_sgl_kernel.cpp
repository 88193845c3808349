// The five libtorch/libc10 symbols that sglang-kernel 0.4.10 (built for torch 2.14.1) needs and torch 2.11 lacks,
// defined over torch 2.11's own functions, so that sgl_kernel's common_ops loads on the GPU machine's torch 2.11.
// No torch headers: each symbol is named by its mangled name (nm -D on the 2.14.1 / 2.11.0 wheels' libraries).
// Built and loaded by scripts/gpu/torch_shims/build.sh and sitecustomize.py (after `import torch`, before sgl_kernel).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

struct SourceLocation {  // c10::SourceLocation: passed by value, the same in 2.11 and 2.14
  const char* function;
  const char* file;
  uint32_t line;
};

namespace {
// torch 2.14 inserted `inplace` (6) and `out` (14) into the Tag enum; 2.11's has neither.
std::vector<int> tags_for_211(const std::vector<int>& tags) {
  std::vector<int> out;
  for (int t : tags) {
    if (t == 6 || t == 14) continue;
    out.push_back(t < 6 ? t : (t < 14 ? t - 1 : t - 2));
  }
  return out;
}
}  // namespace

// ---- torch 2.11's symbols ----
extern "C" char nie_vtable_211[] __asm__("_ZTVN3c1019NotImplementedErrorE");
void error_ctor_211(void* self, SourceLocation loc, std::string msg)
    __asm__("_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE");
void cuda_check_211(int err, const char* file, const char* func, uint32_t line, bool device_asserts)
    __asm__("_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jb");
void* def_schema_211(void* lib, void* schema, void* out_name, const std::vector<int>& tags, int rv)
    __asm__("_ZNR5torch7Library4_defEON3c1014FunctionSchemaEPNS1_12OperatorNameERKSt6vectorIN2at3TagESaIS8_EENS_17_"
            "RegisterOrVerifyE");
void* def_fn_211(void* lib, void* name_or_schema, void* fn, const std::vector<int>& tags)
    __asm__("_ZNR5torch7Library4_defEOSt7variantIJN3c1012OperatorNameENS2_14FunctionSchemaEEEONS_11CppFunctionERKSt6"
            "vectorIN2at3TagESaISB_EE");

// ---- the 2.14 symbols sglang-kernel links ----
extern "C++" {
// c10::NotImplementedError::NotImplementedError(SourceLocation, std::string): 2.11 inherits Error's constructor
void nie_ctor(void* self, SourceLocation loc, std::string msg)
    __asm__("_ZN3c1019NotImplementedErrorC1ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE");
void nie_ctor(void* self, SourceLocation loc, std::string msg) {
  error_ctor_211(self, loc, std::move(msg));
  *static_cast<void**>(self) = nie_vtable_211 + 2 * sizeof(void*);  // past offset-to-top and typeinfo
}

// c10::cuda::CUDAErrorLogCapture::CUDAErrorLogCapture(): an empty class in 2.14; nothing to capture on 2.11
void capture_ctor(void* self) __asm__("_ZN3c104cuda19CUDAErrorLogCaptureC1Ev");
void capture_ctor(void*) {}

// c10::cuda::c10_cuda_check_implementation(int, const char*, const char*, uint32_t, bool, CUDAErrorLogCapture*)
void cuda_check(int err, const char* file, const char* func, uint32_t line, bool device_asserts, void* capture)
    __asm__("_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jbPNS0_19CUDAErrorLogCaptureE");
void cuda_check(int err, const char* file, const char* func, uint32_t line, bool device_asserts, void*) {
  cuda_check_211(err, file, func, line, device_asserts);
}

// torch::Library::_def(FunctionSchema&&, OperatorName*, const std::vector<torch::headeronly::Tag>&, _RegisterOrVerify) &
void* def_schema(void* lib, void* schema, void* out_name, const std::vector<int>& tags, int rv)
    __asm__("_ZNR5torch7Library4_defEON3c1014FunctionSchemaEPNS1_12OperatorNameERKSt6vectorINS_10headeronly3TagESaIS8_"
            "EENS_17_RegisterOrVerifyE");
void* def_schema(void* lib, void* schema, void* out_name, const std::vector<int>& tags, int rv) {
  return def_schema_211(lib, schema, out_name, tags_for_211(tags), rv);
}

// torch::Library::_def(std::variant<OperatorName, FunctionSchema>&&, CppFunction&&, const std::vector<Tag>&) &
void* def_fn(void* lib, void* name_or_schema, void* fn, const std::vector<int>& tags)
    __asm__("_ZNR5torch7Library4_defEOSt7variantIJN3c1012OperatorNameENS2_14FunctionSchemaEEEONS_11CppFunctionERKSt6"
            "vectorINS_10headeronly3TagESaISB_EE");
void* def_fn(void* lib, void* name_or_schema, void* fn, const std::vector<int>& tags) {
  return def_fn_211(lib, name_or_schema, fn, tags_for_211(tags));
}
}
