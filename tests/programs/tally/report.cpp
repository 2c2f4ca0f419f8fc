#include "report.hpp"

#include <sstream>

std::string report(const std::string &name, const counts &c) {
    std::ostringstream out;
    long mean = counts_mean_x100(&c);
    out << name << ": n=" << c.n << " sum=" << c.sum << " min=" << c.min << " max=" << c.max
        << " range=" << counts_range(&c) << " mean=" << mean / 100 << "." << (mean % 100 < 10 ? "0" : "")
        << mean % 100 << "\n";
    return out.str();
}
