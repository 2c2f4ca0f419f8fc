# The shared library, as zstd's lib/Makefile makes its own: a target-specific append to
# LDFLAGS. LDFLAGS given on make's command line would override the append (and link without
# -shared); given in the environment, it is appended to.
CXXFLAGS ?= -O2

libfixed.so: LDFLAGS += -shared
libfixed.so: fixed.o
	$(CXX) $(CXXFLAGS) $(LDFLAGS) -o $@ fixed.o

fixed.o: fixed.cpp fixed.hpp
	$(CXX) $(CXXFLAGS) -fPIC -c -o $@ fixed.cpp
