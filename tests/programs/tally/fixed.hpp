// Fixed-point formatting: the C++ shared library (libfixed.so).
#pragma once
#include <string>

// "12.34" for 1234: a value held in hundredths.
std::string fixed2(long hundredths);
