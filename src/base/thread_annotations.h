// Clang thread-safety annotations (no-ops on other compilers). Every mutex-guarded field says so.
#pragma once

#if defined(__clang__)
#define DI_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define DI_THREAD_ANNOTATION(x)
#endif

#define DI_GUARDED_BY(x) DI_THREAD_ANNOTATION(guarded_by(x))
#define DI_REQUIRES(...) DI_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define DI_EXCLUDES(...) DI_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
