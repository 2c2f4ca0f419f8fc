double square_area(double side);
double circle_area(double radius);
void report(const char *name, double area);
