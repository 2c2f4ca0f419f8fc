// Formats a tally for people: the C++ side of the program.
#pragma once
#include <string>

#include "counts.h"

std::string report(const std::string &name, const counts &c);
