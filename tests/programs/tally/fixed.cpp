#include "fixed.hpp"

std::string fixed2(long hundredths) {
    std::string sign = hundredths < 0 ? "-" : "";
    long magnitude = hundredths < 0 ? -hundredths : hundredths;
    std::string cents = std::to_string(magnitude % 100);
    return sign + std::to_string(magnitude / 100) + "." + (cents.size() < 2 ? "0" : "") + cents;
}
